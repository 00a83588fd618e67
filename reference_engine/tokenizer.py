"""Byte-level tokenizer: every UTF-8 byte is a token, plus BOS and EOS.

A byte vocabulary needs no download and can represent any text, which keeps the
torch executor self-contained. It also makes multi-byte characters span several
tokens, which is exactly the case the streaming detokenizer must get right.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

BOS_ID = 256
EOS_ID = 257
VOCAB_SIZE = 258

# A plain-text rendering of the Llama-3 chat layout. The markers are ordinary text
# (the vocabulary has no special tokens for them), so they round-trip through
# encode/decode unchanged:
#
#   <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
#   ... one block per message ...
#   <|start_header_id|>assistant<|end_header_id|>\n\n      (generation prompt)
HEADER_START = "<|start_header_id|>"
HEADER_END = "<|end_header_id|>"
END_OF_TURN = "<|eot_id|>"
CHAT_ROLES = frozenset({"system", "user", "assistant", "tool"})


class ByteTokenizer:
    """Token ids 0..255 are raw bytes; 256 is BOS, 257 is EOS."""

    bos_token_id = BOS_ID
    eos_token_id = EOS_ID
    vocab_size = VOCAB_SIZE

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        ids = list(text.encode("utf-8"))
        return [BOS_ID, *ids] if add_bos else ids

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for; special tokens stand for no text."""
        if token_id < 0 or token_id >= VOCAB_SIZE:
            raise ValueError(f"token_id {token_id} is outside the vocabulary [0, {VOCAB_SIZE})")
        if token_id >= 256:
            return b""
        return bytes((token_id,))

    def decode(self, ids: Iterable[int]) -> str:
        """Whole-sequence decode: special tokens dropped, invalid UTF-8 becomes U+FFFD."""
        raw = bytearray()
        for token_id in ids:
            raw += self.token_bytes(token_id)
        return raw.decode("utf-8", errors="replace")

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True
    ) -> str:
        """Render chat messages as one prompt string (see the layout above)."""
        if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
            raise ValueError("messages must be a non-empty list of {role, content} objects")
        parts: list[str] = []
        for index, message in enumerate(messages):
            role, content = _validated_message(index, message)
            parts.append(f"{HEADER_START}{role}{HEADER_END}\n\n{content}{END_OF_TURN}")
        if add_generation_prompt:
            parts.append(f"{HEADER_START}assistant{HEADER_END}\n\n")
        return "".join(parts)


def _validated_message(index: int, message: Any) -> tuple[str, str]:
    if not isinstance(message, Mapping):
        raise ValueError(f"messages[{index}] must be an object with role and content")
    role = message.get("role")
    if role not in CHAT_ROLES:
        raise ValueError(f"messages[{index}].role must be one of {sorted(CHAT_ROLES)}, got {role!r}")
    content = message.get("content")
    if content is None and role == "assistant":
        return role, ""
    if isinstance(content, str):
        return role, content
    # OpenAI also accepts a list of content parts; only text parts mean anything here.
    if isinstance(content, list):
        texts: list[str] = []
        for part_index, part in enumerate(content):
            if (
                not isinstance(part, Mapping)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise ValueError(
                    f"messages[{index}].content[{part_index}] must be a text part "
                    '({"type": "text", "text": "..."})'
                )
            texts.append(part["text"])
        return role, "".join(texts)
    raise ValueError(f"messages[{index}].content must be a string or a list of text parts")
