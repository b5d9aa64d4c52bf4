"""Privacy: secrets never reach a file, a table or an API.

- `redact`: the one redaction (config files, MLflow params and tags, traces, parameters, logs);
- `private`: values that reach a flow without becoming Prefect parameters, and private files.

May import: nothing of ours (a leaf).
"""
