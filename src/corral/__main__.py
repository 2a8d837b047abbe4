from corral.cli.main import main

raise SystemExit(main())
