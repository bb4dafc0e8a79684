"""``python -m bloomswarm`` runs the command-line interface."""

from bloomswarm.main import main

raise SystemExit(main())
