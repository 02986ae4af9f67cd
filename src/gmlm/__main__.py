from gmlm.cli.main import main

raise SystemExit(main())
