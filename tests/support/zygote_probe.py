"""What a process started by the CLI fork server sees, for tests/unit/support/test_cli_zygote.py:
`python -m tests.support.zygote_probe report` prints it as JSON; `wait FILE` waits for FILE to
exist (bounded); `fail CODE` writes to stderr and exits CODE; `raise` dies of an exception."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time

import numpy as np


def main() -> None:
    what = sys.argv[1]
    if what == "report":
        print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
                          "argv": sys.argv, "env": os.environ.get("ZYGOTE_PROBE"),
                          "random": random.random(), "np_random": float(np.random.random()),
                          "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                          "stdin": sys.stdin.read()}))
    elif what == "wait":
        end = time.monotonic() + 30
        while not os.path.exists(sys.argv[2]) and time.monotonic() < end:
            time.sleep(0.01)
        print("seen" if os.path.exists(sys.argv[2]) else "not seen")
    elif what == "touch":
        open(sys.argv[2], "w").close()
    elif what == "fail":
        sys.stderr.write("one line\n")
        raise SystemExit(int(sys.argv[2]))
    elif what == "raise":
        raise ValueError("boom")
    elif what == "sleep":
        time.sleep(float(sys.argv[2]))


if __name__ == "__main__":
    main()
