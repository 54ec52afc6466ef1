"""Starting a rank on another host over ssh, so that it can be stopped like a local one.

ssh gives no way to signal the remote process, and a remote process outlives a dropped
connection. So the remote side is a small POSIX sh wrapper (WRAPPER): it starts the rank in a
session and process group of its own (setsid), then watches its stdin, which is the launcher's
pipe to ssh. When that stdin closes (the launcher closed it to stop the rank, or the ssh process
or the launcher died), it sends SIGTERM to the rank's whole group and SIGKILL to what is left
after a grace. The wrapper exits with the rank's status, which ssh passes on (255: ssh itself
failed). Pure functions; the launcher keeps ssh's stdin open for as long as the rank should run.
"""
import os
import re
import shlex

# The grace between SIGTERM and SIGKILL on the remote host, in seconds (as RankGroup.stop's).
REMOTE_GRACE_S = 10

# $1: working directory (kept if it does not exist there); $2: grace in tenths of a second; the
# rest: the command. fd 3 keeps the wrapper's stdin for the watcher: a background list's stdin
# is /dev/null in a non-interactive sh. The watcher writes nowhere, so that only the rank keeps
# ssh's output open; when the rank ends by itself, its group's leftovers are stopped too, else
# they would hold the connection open.
WRAPPER = r"""cd "$1" 2>/dev/null
grace=$2
shift 2
exec 3<&0
setsid "$@" </dev/null 3<&- &
pid=$!
(
  cat <&3 >/dev/null
  kill -TERM -$pid
  i=0
  while kill -0 -$pid && [ $i -lt $grace ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL -$pid
) >/dev/null 2>&1 &
watcher=$!
exec 3<&-
wait $pid
rc=$?
kill -TERM -$pid 2>/dev/null
kill $watcher 2>/dev/null
exit $rc
"""

# Variables of this machine or this login session, not passed to remote ranks.
_LOCAL_NAMES = {"HOME", "USER", "LOGNAME", "SHELL", "HOSTNAME", "HOST", "PWD", "OLDPWD", "SHLVL",
                "_", "TERM", "TERMCAP", "DISPLAY", "MAIL", "TMPDIR", "PS1", "PS2", "LS_COLORS",
                "COLUMNS", "LINES"}
_LOCAL_PREFIXES = ("SSH_", "XDG_", "BASH_FUNC_")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def forwarded_env(env):
    """The part of `env` a remote rank gets (as horovodrun forwards the launcher's environment):
    all but this machine's and this session's own variables."""
    return {k: v for k, v in env.items()
            if _NAME.match(k) and k not in _LOCAL_NAMES and not k.startswith(_LOCAL_PREFIXES)}


def ssh_command(host, command, env, cwd=None, ssh_port=None, identity_file=None,
                config_file=None, grace_s=REMOTE_GRACE_S):
    """The argv that runs `command` on `host` through ssh and the wrapper, with `env` (the
    variables to set there, already filtered) and `cwd` (default this process's)."""
    ssh = ["ssh", "-o", "BatchMode=yes"]
    if config_file:
        ssh += ["-F", config_file]
    if ssh_port:
        ssh += ["-p", str(ssh_port)]
    if identity_file:
        ssh += ["-i", identity_file]
    remote = (["env"] + [f"{k}={v}" for k, v in sorted(env.items())]
              + ["sh", "-c", WRAPPER, "allreduced-rank", cwd or os.getcwd(),
                 str(int(grace_s * 10))] + list(command))
    return ssh + ["--", host, shlex.join(remote)]
