"""Every bound on outside input, in one place, and the pure checks that apply them.

Outside input is whatever the plugin did not write itself: the downward-API annotations file,
KAITO's inference config, the presets file, JSON in flags and in the config, a checkpoint's
config.json, cgroup and /proc files, the device tools' output, a server's `/metrics` and the
URLs given to `vllm-specdec status`. Each parser (`inputs/parsers.py`, `platforms/`, `cli/`) reads
its bound here, so a bound is changed in one place and `docs/reliability.md` lists them all with
their measured worst case. Pure: numbers and checks on text, no I/O.
"""

from __future__ import annotations

import itertools
import re

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError

KIB, MIB = 1024, 1024 * 1024

# --- sizes: at most this much of each input is read ------------------------------------------
MAX_ANNOTATIONS_BYTES = 256 * KIB
"""Kubernetes caps all annotations of an object at 256 KiB."""
MAX_CONFIG_BYTES = MIB
"""KAITO's inference_config.yaml: a ConfigMap holds at most 1 MiB."""
MAX_PRESETS_BYTES = MIB
"""The user's presets file: a ConfigMap's size, like the config."""
MAX_CHECKPOINT_CONFIG_BYTES = 4 * MIB
"""A checkpoint's config.json (the largest multimodal ones are about 100 KiB)."""
MAX_JSON_TEXT_BYTES = MIB
"""One JSON value given as text: `--speculative-config`, the config's JSON string."""
MAX_HOST_FILE_BYTES = 64 * KIB
"""A cgroup or /proc file (memory.max, /proc/self/cgroup, /proc/meminfo: a few KiB)."""
MAX_TOOL_OUTPUT_BYTES = MIB
"""What `nvidia-smi -L` / `rbln-smi` may print (one line per device)."""
MAX_METRICS_BYTES = 16 * MIB
"""One `/metrics` response read by `vllm-specdec status`."""

# --- structure -------------------------------------------------------------------------------
MAX_DEPTH = 64
"""Nesting of YAML and JSON collections (a speculative config nests 2 levels, config.json 4)."""
MAX_YAML_NODES = 100_000
"""YAML nodes of one document, each alias counted as the whole node it repeats."""
MAX_YAML_EXPANDED_CHARS = 4 * MIB
"""Scalar characters of one YAML document, each alias counted as the text it repeats."""
MAX_INT_DIGITS = 32
"""Digits of an integer (a 64-bit count has 20)."""
MAX_FLOAT_CHARS = 64
"""Characters of a written floating-point number."""

# --- strings ---------------------------------------------------------------------------------
MAX_PATH_CHARS = 4096
"""A model, draft or file path, or a Hugging Face repo id (Linux PATH_MAX)."""
MAX_PATH_PART_CHARS = 255
"""One `/`-separated part of it (Linux NAME_MAX; a repo id's parts are shorter)."""
TEXT_ENCODING = "utf-8"
"""Files are read as strict UTF-8; other bytes are refused with their offset."""

# --- vllm-specdec status ---------------------------------------------------------------------
SCRAPE_DEADLINE_S = 10.0
"""One scrape (name lookup, connect, TLS, request, headers and body together, redirects
included) ends within this, however the server trickles (`cli/deadline_http.py`)."""
MAX_REDIRECTS = 3
MAX_COUNTER = 1e18
"""A counter sample above this is not a count (the server is broken): ignored, so sums stay
finite; NaN and infinite samples likewise."""
MAX_POSITIONS = 1024
"""Per-position acceptance: positions at or above this are ignored (k is at most 128)."""
MIN_WATCH_S, MAX_WATCH_S = 0.1, 86_400.0
"""`--watch SECONDS`: between a tenth of a second and a day."""


def decode_text(data: bytes, what: str, fix: str) -> str:
    """`data` as strict UTF-8, else one refusal naming `what`, the first bad byte and `fix`."""
    try:
        return data.decode(TEXT_ENCODING)
    except UnicodeDecodeError as exc:
        raise SpecDecodeConfigError(
            f"{what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            f"{fix}") from None


def ascii_decimal(text: str, max_digits: int = MAX_INT_DIGITS) -> int | None:
    """A non-negative decimal integer written in ASCII digits only, else None.

    `str.isdigit` and `int` accept other scripts' digits ("²", "١٢"); host files and labels
    never hold those, so they are not numbers here. Longer than `max_digits`: None.
    """
    text = text.strip()
    if not text or len(text) > max_digits or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DELTA = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deeply the collections of JSON `text` nest, found without recursion.

    Strings are skipped (an unterminated one runs to the end, so the scan stays linear); the
    brackets left are counted. For text that is not JSON the figure is an upper bound, which
    is all a refusal needs: the JSON parser refuses that text anyway.
    """
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(_DELTA[ch] for ch in brackets), default=0)


def int_too_large(value: int, max_digits: int = MAX_INT_DIGITS) -> bool:
    """Whether `value` has more than `max_digits` decimal digits (no string conversion)."""
    return bool(abs(value) >= 10 ** max_digits)


def printable(text: str) -> str:
    """`text` safe to print on a terminal: control and format characters (ESC, CR, BEL, the C1
    range, bidi overrides) escaped as `\\xNN` / `\\uNNNN`, everything else as it is."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


# --- vllm-specdec whatif: traffic files ---------------------------------------------------------
MAX_TRAFFIC_BYTES = 4 * 1024 * MIB
"""A traffic file (`inputs/traffic.py`): JSONL is streamed, so this bounds time, not memory;
past it the reading stops and says so."""
MAX_TRAFFIC_LINE_BYTES = 8 * MIB
"""One JSONL line: a request with a 1M-token context is about 4 MiB of text. A longer line is
read to its end in bounded chunks and skipped as bad, never held whole."""
MAX_SHAREGPT_BYTES = 256 * MIB
"""A ShareGPT JSON array, which must be parsed whole (text, parsed objects and records: a few
times this in memory). A larger one is refused with the fix: the same conversations as JSONL,
one a line, are streamed."""
MAX_TRAFFIC_REQUESTS = 1_000_000
"""Requests read from one file unless `--max-requests` lowers it (`whatif` tokenizes records
as they are read and holds only their tokens, bounded by `MAX_TRAFFIC_TOKENS`)."""
MAX_TRAFFIC_TEXT_CHARS = 4 * MIB
"""Characters of one prompt, completion, or chat history (a whole ShareGPT conversation):
about a million tokens, the longest context windows served."""
MAX_TRAFFIC_MESSAGES = 1024
"""Messages in one chat request or turns in one conversation (each assistant turn is
replayed with its history, so a conversation's records cost its turns squared)."""
MAX_REQUEST_TOKENS = 1 << 20
"""Prompt plus completion tokens of one replayed request, and the length of a token-id list
in a log: the longest context windows served (1M tokens)."""
MAX_TRAFFIC_TOKENS = 1 << 28
"""Tokens of all replayed requests together (1 GiB as int32): tokenizing stops there and
says so, so memory stays bounded whatever the file holds."""
MAX_LINE_RENDERED_MESSAGES = 1 << 17
"""Messages the chat template renders for one line's requests together: each turn of a
conversation is rendered with its whole history (as vLLM's server renders it), so a line of m
messages renders about m**2 / 4; 131,072 keeps every turn of a 724-message conversation (about
3 s with a two-pass template like Qwen3's here). Later turns are skipped and counted."""
MAX_LINE_RENDERED_CHARS = 1 << 28
"""Characters of history the chat template renders for one line's requests together (256 Mi,
about 0.3 s of rendering here), checked before rendering; later turns are skipped."""
MAX_LINE_TOKENIZED_CHARS = 2 * MAX_TRAFFIC_TEXT_CHARS
"""Characters one line's chat requests tokenize from scratch: a conversation's longest
history once, then each turn's tail after the last special token it shares with it. A chat
template that does not render earlier turns as a prefix of later ones re-tokenizes histories
and stops here (later turns skipped and counted); a prefix-rendering template never does."""

# --- vllm-specdec whatif: flags and step costs ------------------------------------------------
MAX_SPEC_TOKENS = 64
"""`--k`: the largest k replayed (the adaptive proposer's default is 16, vLLM's suffix 24)."""
MAX_NGRAM_LOOKUP = 1024
"""`--prompt-lookup-min/max`: vLLM's matcher allocates prompt_lookup_max ints every step."""
MAX_BATCH_SIZE, MAX_BATCH_SIZES = 4096, 32
"""`--batches`: at most 32 batch sizes, each from 1 to 4096."""
MAX_MODEL_LEN = 1 << 24
"""`--max-model-len`, and a checkpoint's context length (16 Mi tokens: above the longest
context windows served, 10 M); the replay's token row is held at most this long."""
MAX_STEP_SECONDS = 600.0
"""A decode step's cost in `--costs` (no_draft_s, switch_s, per_token_s): ten minutes is past
any engine; a figure above it is not a step cost."""
MIN_STEP_SECONDS = 1e-6
"""The shortest no-draft step a `--costs` file may claim (a microsecond: no engine steps faster)."""
MAX_FIXED_TOKENS = 1e6
"""`fixed_tokens` in `--costs`: a step's fixed cost in verified tokens' worth (about 16 on the
CPU engine, hundreds on a GPU at small batch)."""
