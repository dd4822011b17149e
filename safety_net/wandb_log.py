"""
nanoGPT's Weights & Biases logging (wandb_log, wandb_project, wandb_run_name): checked before a run (check_wandb),
then each log.csv row sent (WandbLog).
"""

import os
import socket
import sys
import urllib.parse


from safety_net.configurator import UserError


def import_wandb():
    try:
        import wandb
    except ImportError:
        raise UserError("wandb_log=True logs to Weights & Biases, but the wandb package is not installed "
                        "(fix: pip install wandb, or --wandb_log=False)") from None
    return wandb


WANDB_CONNECT_S = 5   # check_wandb waits this long for the server


def check_wandb():
    """W&B logging, checked before anything on disk changes, each problem in one line: the package, an API key
    (WANDB_API_KEY, WANDB_IDENTITY_TOKEN_FILE, or `wandb login`'s netrc entry), the server reachable within
    WANDB_CONNECT_S seconds. WANDB_MODE=offline or disabled needs neither. Our choice: what fails only later (a
    key the server refuses, a server gone) turns W&B logging off with a warning, and the run goes on (WandbLog)."""
    import_wandb()
    if os.environ.get("WANDB_MODE", "") in ("offline", "disabled", "dryrun"):
        return
    host, port = wandb_server()
    offline = "WANDB_MODE=offline to log on this machine (wandb sync uploads it later), or --wandb_log=False"
    if not (os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE") or netrc_login(host)):
        raise UserError(f"wandb_log=True, but no W&B API key is set for {host} (fix: `wandb login` or "
                        f"WANDB_API_KEY=..., or {offline})")
    try:
        socket.create_connection((host, port), timeout=WANDB_CONNECT_S).close()
    except OSError as e:
        raise UserError(f"wandb_log=True, but the W&B server {host}:{port} cannot be reached in "
                        f"{WANDB_CONNECT_S} s ({e.strerror or type(e).__name__}) (fix: check the network or "
                        f"WANDB_BASE_URL, or {offline})") from None


def wandb_server():
    """(host, port) of WANDB_BASE_URL (https://api.wandb.ai when unset), refused in one line when it has no
    http:// or https:// (its host was read as empty) or a port that is no number in [0, 65535] (a ValueError
    traceback; a hunt found both). Port 0, as none: the scheme's default."""
    base = os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai"
    url = urllib.parse.urlsplit(base)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise UserError(f"WANDB_BASE_URL={base} needs http:// or https:// and a host (fix: e.g. "
                        f"WANDB_BASE_URL=https://api.wandb.ai, or unset it)")
    try:
        port = url.port
    except ValueError as e:   # "Port could not be cast to integer value as 'abc'", "Port out of range 0-65535"
        raise UserError(f"WANDB_BASE_URL={base}: {e} (fix: a port in [1, 65535], or none for the scheme's "
                        f"default)") from None
    return url.hostname, port or (443 if url.scheme == "https" else 80)


def netrc_login(host):
    """Whether the netrc file (NETRC, else ~/.netrc: where `wandb login` keeps the key) has an entry for host."""
    import netrc
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbLog:
    """nanoGPT's Weights & Biases logging: with wandb_log=True, each evaluation logs what nanoGPT's train.py logs
    that we have: iter, train/loss, val/loss, lr (nanoGPT also logs mfu, an estimate we do not make). What W&B
    needs is checked before the run starts (check_wandb); the W&B run (wandb.init with wandb_project,
    wandb_run_name and the config, as nanoGPT) starts at the first evaluation, and if W&B fails then or later,
    logging to it stops with a warning while training goes on. Only the master process logs. WANDB_MODE=offline
    keeps it on this machine."""

    def __init__(self, config, master=True):
        self.config, self.run = config, None
        self.wandb = import_wandb() if config["wandb_log"] and master else None

    def log(self, row):
        """Log one evaluation row of train.py (iter, loss, val_loss, lr)."""
        if self.wandb is None or row["kind"] != "eval":
            return
        try:
            if self.run is None:
                self.run = self.wandb.init(project=self.config["wandb_project"],
                                           name=self.config["wandb_run_name"] or None, config=dict(self.config))
            self.run.log({"iter": row["iter"], "train/loss": row["loss"], "val/loss": row["val_loss"],
                          "lr": row["lr"]})
        except Exception as e:   # wandb's own errors (a refused key, a timeout, ...): the run is worth more
            print(f"warning: W&B logging failed ({type(e).__name__}: {' '.join(str(e).split())[:200]}); it is off "
                  f"for the rest of this run (log.csv keeps every row)", file=sys.stderr, flush=True)
            self.wandb = None
