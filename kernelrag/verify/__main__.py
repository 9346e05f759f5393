"""``python -m kernelrag.verify TASK CAND [--device cuda] [--json]`` (see ``cli``)."""
import sys

from kernelrag.verify.cli import main

sys.exit(main())
