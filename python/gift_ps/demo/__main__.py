import sys

from gift_ps.demo.driver import main

sys.exit(main())
