"""`python -m vllm_specdec_plugin.launcher`."""

import sys

from vllm_specdec_plugin.launcher import main

sys.exit(main())
