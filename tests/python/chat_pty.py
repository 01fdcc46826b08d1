"""Drives `minfer-wgpu chat` through a pseudo-terminal as a person at a keyboard would.

Usage: chat_pty.py BINARY MODEL DATA_DIR

Types "ello", moves to the line's start with four Left arrows and types "H" (the line sent is
"Hello"); recalls it with Up, types " again" at its end (sent: "Hello again"); types "abc" and
Ctrl-C (the line is dropped); then Ctrl-D. XDG_DATA_HOME is DATA_DIR, so the history file is
DATA_DIR/minfer/chat_history. Prints what the terminal showed, then exits with the chat's exit
status (1 if it did not end).
"""

import os
import pty
import select
import sys
import time

binary, model, data = sys.argv[1:4]
env = dict(os.environ, XDG_DATA_HOME=data, TERM="xterm")
pid, fd = pty.fork()
if pid == 0:
    os.execvpe(binary, [binary, "chat", model, "--temp", "0", "-n", "4"], env)

shown = bytearray()


def settle(quiet, limit):
    """Reads until nothing has come for `quiet` seconds (or `limit` passed)."""
    end = time.time() + limit
    last = time.time()
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return
            if not chunk:
                return
            shown.extend(chunk)
            last = time.time()
        elif time.time() - last >= quiet and shown:
            return


def keys(*parts):
    for p in parts:
        os.write(fd, p)
        time.sleep(0.15)


LEFT, UP, ENTER, CTRL_C, CTRL_D = b"\x1b[D", b"\x1b[A", b"\r", b"\x03", b"\x04"

settle(2.0, 120)  # the model loads, the banner and the first prompt
keys(b"ello", LEFT, LEFT, LEFT, LEFT, b"H", ENTER)
settle(2.0, 120)  # the answer
keys(UP, b" again", ENTER)
settle(2.0, 120)
keys(b"abc", CTRL_C)
settle(1.0, 30)
keys(CTRL_D)
settle(1.0, 30)

status = None
for _ in range(100):
    done, st = os.waitpid(pid, os.WNOHANG)
    if done:
        status = os.waitstatus_to_exitcode(st)
        break
    time.sleep(0.1)
sys.stdout.write(shown.decode("utf-8", "replace"))
if status is None:
    os.kill(pid, 9)
    sys.exit(1)
sys.exit(status)
