# optimum/rbln/transformers/models/decoderonly/modeling_decoderonly.py:22
from rebel import CompileContext  # noqa: F401
