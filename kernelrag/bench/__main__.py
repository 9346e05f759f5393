"""``python -m kernelrag.bench``: the suite runner (see ``kernelrag.bench.runner``)."""
import sys

from kernelrag.bench.runner import main

sys.exit(main())
