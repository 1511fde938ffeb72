"""`python -m litellm_fastpath explain config.yaml` (see `explain`)."""

import sys

from litellm_fastpath.explain import main

sys.exit(main())
