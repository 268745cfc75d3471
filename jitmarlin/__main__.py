from jitmarlin.service.cli import main

raise SystemExit(main())
