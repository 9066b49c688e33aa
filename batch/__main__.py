from batch.cli import main

raise SystemExit(main())
