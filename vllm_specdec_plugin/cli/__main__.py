"""`python -m vllm_specdec_plugin.cli`."""

import sys

from vllm_specdec_plugin.cli import main

sys.exit(main())
