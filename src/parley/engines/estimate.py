"""A prompt's tokens where no tokenizer is at hand: the one estimate, used by the api to
reserve a budget for a model it has no tokenizer of and by an upstream engine until the
server's ``usage`` says how many it really read.

``CHARS_PER_TOKEN`` characters a token, rounded up, plus every UTF-8 byte past a
character's first, plus the template's few tokens a message. Real tokenizers average about
four and a half characters a token on English prose, so this errs high there. The bytes
beyond the first keep it high where a byte-level tokenizer spends up to a token a byte (CJK,
emoji; SmolLM2: 0.4 characters a token); ASCII text counts exactly
``ceil(chars / CHARS_PER_TOKEN)``. It is still low for runs of digits (one token each), dense
code or JSON (about two characters a token) and templates that add a default system prompt
(SmolLM2's: 20 tokens); settlement charges the rest.
"""

from __future__ import annotations

import math

from parley.engines.interface import ChatMessage

CHARS_PER_TOKEN = 3
# A chat template's own tokens, where no template is at hand: ChatML spends five a message
# (<|im_start|> role \n … <|im_end|> \n) and three on the assistant's opening, Llama 3 five
# and five (with <|begin_of_text|>): the larger of each.
MESSAGE_OVERHEAD_TOKENS = 5
PROMPT_OVERHEAD_TOKENS = 5


def estimate(messages: list[ChatMessage]) -> int:
    """The prompt's tokens, estimated (see the module's text)."""
    return sum(estimate_text(m.content) for m in messages) + PROMPT_OVERHEAD_TOKENS


def estimate_text(content: str) -> int:
    """One message's tokens, its template's included."""
    extra_bytes = len(content.encode("utf-8", "surrogatepass")) - len(content)
    return math.ceil(len(content) / CHARS_PER_TOKEN) + extra_bytes + MESSAGE_OVERHEAD_TOKENS
