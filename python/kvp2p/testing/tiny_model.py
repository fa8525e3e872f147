"""A local Llama-architecture model with random weights and its tokenizer,
for tests, the demo and the benchmark: no hub, no download.

The weights are drawn from a fixed seed, so two builds with the same shape
are the same model; the tokenizer is a byte-level BPE trained on a few
strings (any text encodes, since every byte is in its alphabet).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

_CORPUS = [
    "kvp2p moves the KV cache of a prefix from one engine to another, so that a request whose prefix "
    "was computed elsewhere loads its blocks instead of recomputing them.",
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.",
    "0123456789 ,.;:!?()[]{}<>+-*/=_'\" abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "When a peer dies, every request that depended on it falls back to local prefill at once.",
]


@dataclass(frozen=True)
class Shape:
    hidden: int = 256
    layers: int = 2
    heads: int = 4
    kv_heads: int = 4
    intermediate: int = 512
    vocab: int = 512
    max_len: int = 2048
    seed: int = 0
    dtype: str = "bfloat16"

    @property
    def name(self) -> str:
        return (f"llama-h{self.hidden}-l{self.layers}-a{self.heads}-kv{self.kv_heads}-i{self.intermediate}"
                f"-v{self.vocab}-m{self.max_len}-s{self.seed}-{self.dtype}")

    def params(self) -> int:
        """Parameter count (untied embeddings)."""
        head = self.hidden // self.heads
        attn = self.hidden * self.hidden * 2 + 2 * self.hidden * head * self.kv_heads
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attn + mlp + 2 * self.hidden) + 2 * self.vocab * self.hidden + self.hidden

    def kv_bytes_per_token(self) -> int:
        elem = 4 if self.dtype == "float32" else 2
        return 2 * self.layers * self.kv_heads * (self.hidden // self.heads) * elem


SMALL = Shape()
# For the head-to-head (bench/h2h.py): 8 layers 1024 wide, about 100M
# parameters, 32 KiB of KV per token; recomputing 440 tokens costs about
# a second on this machine's CPU, more than loading them.
MEDIUM = Shape(hidden=1024, layers=8, heads=8, kv_heads=8, intermediate=2752)
# For the benchmark: prefill costs real time on a CPU. About 824M
# parameters, 128 KiB of KV per token (the figures).
BIG = Shape(hidden=2048, layers=16, heads=16, kv_heads=16, intermediate=5504, vocab=512, max_len=4096)


def build(root: str, shape: Shape = SMALL) -> str:
    """Builds (once; reused when present) the model directory under root
    and returns its path."""
    path = os.path.join(root, shape.name)
    stamp = os.path.join(path, "kvp2p-shape.json")
    if os.path.exists(stamp):
        return path
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tmp = f"{path}.tmp-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=shape.vocab - 2, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.model_max_length = shape.max_len
    fast.save_pretrained(tmp)
    cfg = LlamaConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.max_len, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False, torch_dtype=shape.dtype,
    )
    torch.manual_seed(shape.seed)
    model = LlamaForCausalLM(cfg).to(getattr(torch, shape.dtype))
    model.save_pretrained(tmp, safe_serialization=True)
    with open(os.path.join(tmp, "kvp2p-shape.json"), "w") as f:
        json.dump(asdict(shape), f)
    try:
        os.rename(tmp, path)
    except OSError:  # built meanwhile by another process
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return path


def prompt_ids(n: int, seed: int, vocab: int = SMALL.vocab) -> list[int]:
    """n token ids, a fixed function of seed (no special tokens)."""
    import random

    rng = random.Random(seed)
    return [rng.randrange(2, vocab) for _ in range(n)]
