from bench.compare.run import main

raise SystemExit(main())
