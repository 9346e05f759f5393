from kernelrag.cli import main

raise SystemExit(main())
