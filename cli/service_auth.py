"""The credentials of `mars services`, each a random secret in a file of mode 0600 made on the
first start and reused after (never on a command line, never printed: the banner prints
`$(cat FILE)`):

- the Prefect API auth string, `$PREFECT_HOME/mars-api-auth-string` (one per Prefect
  database): the server gets it as PREFECT_SERVER_API_AUTH_STRING, clients and workers as
  PREFECT_API_AUTH_STRING (Prefect's clients send it as basic auth, the UI asks for it once);
- with `--mlflow-auth`, MLflow's basic-auth app: the admin password
  (`<runs-dir>/services/mlflow-admin-password`, user `admin`), the app's configuration
  (`<runs-dir>/services/mlflow-auth.ini`: its user store `<runs-dir>/mlflow-auth.db`, the
  admin password for the first start) and its session key (`mlflow-secret-key`); clients
  use MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD.
"""
from __future__ import annotations

import os
import secrets
import shlex
from pathlib import Path

from mars_core.config import ConfigError

AUTH_FILE = "mars-api-auth-string"  # in $PREFECT_HOME
MLFLOW_ADMIN = "admin"


def read_secret(path: Path) -> str:
    """The secret in `path`; refused in one line when other users can read it or it is empty."""
    st = path.stat()
    if st.st_mode & 0o077 or st.st_uid != os.getuid():
        raise ConfigError(f"{path} is open to other users (mode {st.st_mode & 0o777:o}): delete it "
                          "(a new secret is made at the next start) or `chmod 600` it")
    value = path.read_text().strip()
    if not value:
        raise ConfigError(f"{path} is empty: delete it (a new secret is made at the next start)")
    return value


def secret_in(path: Path) -> str:
    """The secret in `path`, made (random, mode 0600) when the file is not there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_secret(path)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    return read_secret(path)


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def prefect_home() -> Path:
    from prefect.settings import get_current_settings

    return Path(get_current_settings().home).expanduser()


def prefect_auth_file(home: Path | None = None) -> Path:
    return (Path(home) if home else prefect_home()) / AUTH_FILE


class MlflowAuth:
    """MLflow's basic-auth app for the store of `runs` (files in `runs/services`)."""

    def __init__(self, runs: Path):
        self.dir, self.db = Path(runs) / "services", Path(runs) / "mlflow-auth.db"
        self.password_file = self.dir / "mlflow-admin-password"
        self.ini, self.key_file = self.dir / "mlflow-auth.ini", self.dir / "mlflow-secret-key"

    def check(self) -> None:
        """Refuse in one line what would make the files unusable (writes nothing)."""
        if self.db.exists() and not self.password_file.exists():
            raise ConfigError(f"{self.password_file} is gone but the MLflow user store {self.db} "
                              "holds its admin: delete the store to start over (its users go "
                              "with it)")
        for f in (self.password_file, self.key_file):
            if f.exists():
                read_secret(f)

    def server_env(self) -> dict:
        """The server's environment: its configuration (written now) and its session key."""
        self.check()
        password = secret_in(self.password_file)
        _write_private(self.ini, "[mlflow]\ndefault_permission = READ\n"
                                 f"database_uri = sqlite:///{self.db.resolve()}\n"
                                 f"admin_username = {MLFLOW_ADMIN}\nadmin_password = {password}\n"
                                 "authorization_function = "
                                 "mlflow.server.auth:authenticate_request_basic_auth\n")
        return {"MLFLOW_AUTH_CONFIG_PATH": str(self.ini.resolve()),
                "MLFLOW_FLASK_SERVER_SECRET_KEY": secret_in(self.key_file),
                "MLFLOW_AUTH_ADMIN_USERNAME": None, "MLFLOW_AUTH_ADMIN_PASSWORD": None}

    def export_line(self) -> str:
        return (f"export MLFLOW_TRACKING_USERNAME={MLFLOW_ADMIN} "
                f'MLFLOW_TRACKING_PASSWORD="$(cat {shlex.quote(str(self.password_file))})"')


def prefect_export_line(auth_file: Path) -> str:
    return f'export PREFECT_API_AUTH_STRING="$(cat {shlex.quote(str(auth_file))})"'
