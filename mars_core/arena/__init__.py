"""The arena: agents (checkpoints, registry aliases, `embedded`, bots) play each other over
many games; TrueSkill rates them (`ratings`), every finished game is attributed to a cause
(`attribution`), matches are scheduled with balanced seats (`schedule`), and the leaderboard
reports ratings with all games and without the games an opponent's error decided
(`leaderboard`). A frozen reference pool (`pool`) scores a newcomer on a fixed, seeded
schedule where only the newcomer's rating moves (MindGames' MG-Ref protocol).

May import: config, games, types, vocab.
"""
