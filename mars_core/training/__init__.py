"""Training: the policy update (the train_step stage) and the format warm-up.

- `trainer`: sequence log-probs, PPO epochs over a batch of turns, the torch updater;
- `chunks`: the update's micro-batches (a row per distinct sequence, bounded in rows and tokens);
- `losses`: the PPO-style policy loss, k3 KL penalty, entropy bonus, token aggregation;
- `lora`: LoRA adapters on the start policy instead of every weight (`trainer.lora`);
- `deepspeed_backend`: the same update run by DeepSpeed ranks (`trainer.backend: deepspeed`);
- `warmup`: the supervised format warm-up's data and its probe (the prepare_policy stage).

May import: config, models, rollout, run, types, vocab.
"""
