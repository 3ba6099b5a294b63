#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Writes the seed corpora of tests/fuzz/fuzz_tokenize.c and fuzz_detok.c:
# texts for each refdata vocab, small vocab-only GGUFs (SentencePiece with
# byte tokens, byte-level BPE with merges) for the loader mode, and token-id
# streams with stop strings for the detokenizer.
# Run from the repository root: python3 tests/fuzz/gen_tokenize_corpus.py
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def gguf(kvs):
    """A GGUF v3 file with metadata kvs (list of (key, type, value)) and no tensors."""
    def s(b):
        b = b.encode() if isinstance(b, str) else b
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
    for key, typ, val in kvs:
        out += s(key) + struct.pack("<I", typ)
        if typ == 8:
            out += s(val)
        elif typ == 4:
            out += struct.pack("<I", val)
        elif typ == 7:
            out += struct.pack("<?", val)
        elif typ == 9:
            et, items = val
            out += struct.pack("<IQ", et, len(items))
            for it in items:
                out += s(it) if et == 8 else struct.pack({6: "<f", 5: "<i"}[et], it)
    return out


def spm_vocab():
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    extra = ["\u2581", "\u2581t", "he", "\u2581the", "\u2581a", "in", "\u2581\u2581", "lo", "\u2581hel"]
    toks += extra
    types = [2, 3, 3] + [6] * 256 + [1] * len(extra)
    scores = [0.0] * 259 + [-float(i) for i in range(len(extra))]
    return gguf([("tokenizer.ggml.model", 8, "llama"), ("tokenizer.ggml.tokens", 9, (8, toks)),
                 ("tokenizer.ggml.scores", 9, (6, scores)), ("tokenizer.ggml.token_type", 9, (5, types)),
                 ("tokenizer.ggml.bos_token_id", 4, 1), ("tokenizer.ggml.eos_token_id", 4, 2)])


def bpe_vocab(pre):
    printable = [chr(c) for c in range(0x21, 0x7F)] + [chr(c) for c in range(0xA1, 0xAD)] + \
        [chr(c) for c in range(0xAE, 0x100)] + [chr(0x100 + i) for i in range(68)]
    merges = ["\u0120 t", "h e", "\u0120t he", "i n", "\u0120 a", "e r", "\u0120 \u0120"]
    toks = printable + ["\u0120t", "he", "\u0120the", "in", "\u0120a", "er", "\u0120\u0120",
                        "<|endoftext|>", "<|eot_id|>", "\u00fc"]
    types = [1] * (len(toks) - 3) + [3, 3, 4]
    return gguf([("tokenizer.ggml.model", 8, "gpt2"), ("tokenizer.ggml.pre", 8, pre),
                 ("tokenizer.ggml.tokens", 9, (8, toks)), ("tokenizer.ggml.token_type", 9, (5, types)),
                 ("tokenizer.ggml.merges", 9, (8, merges)),
                 ("tokenizer.ggml.eos_token_id", 4, len(toks) - 3)])


def write(dirname, name, data):
    d = os.path.join(HERE, "corpus", dirname)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    texts = [b"Hello world", b" Hello, world! 123 4567", b"F\xc3\xbchrer \xc3\xb5\xc3\xbc",
             b"int main(void) { return 0; }\n\n\t// done\r\n", b"\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\xa6\x99\xe2\x80\x8d",
             b"<s>a</s><|endoftext|><\xef\xbd\x9cfim\xe2\x96\x81hole\xef\xbd\x9c>", b"x\xff\xfe\xe2\x82 y\xc0\x80",
             b"   \n\n    \xe2\x96\x81\xe2\x96\x81 '''s 'LL"]
    for i, t in enumerate(texts):
        for mode in range(3):
            write("tokenize", "text-%d-%d" % (mode, i), bytes([mode, i % 4]) + t)
    write("tokenize", "vocab-spm", b"\x03" + spm_vocab())
    write("tokenize", "vocab-bpe-llama3", b"\x03" + bpe_vocab("llama-bpe"))
    write("tokenize", "vocab-bpe-deepseek-coder", b"\x03" + bpe_vocab("deepseek-coder"))
    ids = lambda xs: b"".join(struct.pack("<H", x) for x in xs)
    # llama-spm: "▁Hello▁world" then byte tokens of "€" split and a broken sequence
    write("detok", "llama-plain", b"\x00\x00" + ids([1, 15043, 3186, 3 + 0xE2, 3 + 0x82, 3 + 0xAC, 3 + 0xFF, 2]))
    stop = lambda t: bytes([len(t) - 1]) + t  # fuzz_detok reads a length byte as 1 + (b % 8)
    write("detok", "llama-stop", b"\x02\x02" + stop(b" wor") + stop(b"d") +
          ids([1, 15043, 3186, 29871, 13, 3186]))
    write("detok", "gpt2-stop", b"\x01\x01" + stop(b"\n\n") + ids([15496, 995, 198, 198, 50256, 220]))
    write("detok", "gpt2-bytes", b"\x03\x00" + ids([171, 120, 247, 26825, 25208, 50256]))


if __name__ == "__main__":
    main()
