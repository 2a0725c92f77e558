"""
`constrained-sft study` as `python -m constrained_sft` runs it (`cli.console`), with the main process late to open the study folder:
rank 0 looks at the folder only once another rank has written into it, or after `WAIT_S` seconds (test_study). The
order a loaded machine gives at random (CI did), made every time: a launch must give every process its look before
any of them writes, or the main one finds the data another prepared, unmarked, and refuses the study.
"""

import os
import sys
import time

from constrained_sft.cli import console
from constrained_sft.study import conduct

WAIT_S = 5.0

if os.environ.get("RANK") == "0":
    check = conduct.check_comparison_folder

    def late_check(root, *args, **kwargs):
        ends = time.monotonic() + WAIT_S
        while time.monotonic() < ends and not (os.path.isdir(root) and os.listdir(root)):
            time.sleep(0.1)
        return check(root, *args, **kwargs)

    conduct.check_comparison_folder = late_check

sys.exit(console(sys.argv[1:]))
