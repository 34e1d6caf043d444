"""When this process started running the command line: ``harness.cli`` imports this first, before
torch and the rest load, so run.json's wall_s counts the imports."""

import time

PROCESS_T0 = time.perf_counter()
