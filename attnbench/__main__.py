import sys

from attnbench.entry import main

sys.exit(main())
