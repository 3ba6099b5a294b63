#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Oracle for tests/unit/test_jinja_python.c: writes, for MODE (str, num or json) and SEED, a
# conversation of random values (conv.json), a template applying many operations to each
# (t.jinja) and what Python gives for each operation (want.txt): Python's own str methods,
# repr, arithmetic, round, %-formatting, str.format and json.dumps, plus Jinja's title and
# indent filters written from their definitions in Jinja 3.1. Records end with \x1d, fields
# are separated by \x1e. Needs no Jinja: the renderer is checked against Python itself.
#   test_jinja_oracle.py MODE SEED OUTDIR
import json
import os
import random
import re
import sys

SEP, END = "\x1e", "\x1d"


def strings(rng):
    alphabet = list("abcABC xyzXYZ019_-'.,:;!?()[]{}<>\"\\/\t\n\r") + [
        "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2028", "\u2029", "\u3000", "\u200b", "Σ", "σ", "ς",
        "Α", "ß", "İ", "ı", "ǅ", "ǆ", "Ǆ", "ﬁ", "ŉ", "é", "e\u0301", "Ω", "ά", "ΐ", "Ⅻ", "½", "²", "٣",
        "１", "Ａ", "ǰ", "ẞ", "ꭰ", "Ꭰ", "中", "😀", "👍🏽", "\u0345", "ʰ", "\x00", "\x01", "\x7f",
        "\x9f", "\ufeff", "\U0001d400", "ꞌ", "ǈ"]
    vals = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(300)]
    vals += ["", " ", "Σ", "ΑΣ", "ΑΣ Α", "aΣb", "they're", "İstanbul", "ǆemal", "ﬁre", "a\u0345Σ"]

    def jtitle(s):
        return "".join(i[0].upper() + i[1:].lower() for i in re.split(r"([-\s({\[<]+)", s) if i)

    def indent(s):
        s += "\n"
        lines = s.splitlines()
        rv = lines.pop(0)
        if lines:
            rv += "\n" + "\n".join("  " + x if x else x for x in lines)
        return "  " + rv

    ops = [
        ("{{ [s] }}", lambda s: repr([s])),
        ("{{ [s.split(), s.split(' '), s.rsplit(None, 1), s.split(None, 1)] }}",
         lambda s: repr([s.split(), s.split(" "), s.rsplit(None, 1), s.split(None, 1)])),
        ("{{ [s.strip(), s.lstrip('ab '), s.rstrip('xyz\\n'), s.splitlines(), s.splitlines(true)] }}",
         lambda s: repr([s.strip(), s.lstrip("ab "), s.rstrip("xyz\n"), s.splitlines(), s.splitlines(True)])),
        ("{{ [s.lower(), s.upper(), s.title(), s.capitalize(), s.swapcase(), s.casefold()] }}",
         lambda s: repr([s.lower(), s.upper(), s.title(), s.capitalize(), s.swapcase(), s.casefold()])),
        ("{{ [s.isalpha(), s.isdigit(), s.isnumeric(), s.isdecimal(), s.isalnum(), s.isspace(), s.isupper(),"
         " s.islower(), s.istitle(), s.isidentifier(), s.isprintable(), s.isascii()] }}",
         lambda s: repr([s.isalpha(), s.isdigit(), s.isnumeric(), s.isdecimal(), s.isalnum(), s.isspace(),
                         s.isupper(), s.islower(), s.istitle(), s.isidentifier(), s.isprintable(), s.isascii()])),
        ("{{ s|tojson }}", lambda s: json.dumps(s, ensure_ascii=False)),
        ("{{ s|tojson(ensure_ascii=true) }}", lambda s: json.dumps(s)),
        ("{{ [s[::-1], s[1:-1], s[::2], s[-3:], s[5:1:-2]] }}", lambda s: repr([s[::-1], s[1:-1], s[::2], s[-3:], s[5:1:-2]])),
        ("{{ [s.find('a'), s.rfind('a'), s.count('a'), s|length, s.find(''), s.count(''), s.startswith('a'),"
         " s.endswith(('Σ', 'a'))] }}",
         lambda s: repr([s.find("a"), s.rfind("a"), s.count("a"), len(s), s.find(""), s.count(""), s.startswith("a"),
                         s.endswith(("Σ", "a"))])),
        ("{{ [s.replace('a', 'XY'), s.replace('', '|', 3), s.center(20, '*'), s.zfill(10), s.ljust(15, '.'),"
         " s.expandtabs(4), s.partition(' '), s.rpartition('a')] }}",
         lambda s: repr([s.replace("a", "XY"), s.replace("", "|", 3), s.center(20, "*"), s.zfill(10), s.ljust(15, "."),
                         s.expandtabs(4), s.partition(" "), s.rpartition("a")])),
        ("{{ s|title }}", jtitle),
        ("{{ s|wordcount }}", lambda s: str(len(re.findall(r"\w+", s)))),
        ("{{ [s|trim, s|upper, s|lower, s|capitalize, s|string, s|list|length] }}",
         lambda s: repr([s.strip(), s.upper(), s.lower(), s.capitalize(), s, len(list(s))])),
        ("{{ s|indent(2, true) }}", indent),
    ]
    return [{"s": v} for v in vals], "{% set s = m.s %}", ops, lambda rec, f: f(rec["s"])


def numbers(rng):
    def rnum():
        k = rng.random()
        if k < 0.3:
            return rng.randint(-10**9, 10**9)
        if k < 0.4:
            return rng.randint(-20, 20)
        if k < 0.55:
            return round(rng.uniform(-1000, 1000), rng.randint(0, 6))
        if k < 0.7:
            return rng.choice([0.1, 0.2, 0.3, 1 / 3, 2.5, 0.5, -0.5, 1e16, 1e-5, 1e-4, 123456789012345678.0, 1e22,
                               5e-324, 1.7976931348623157e308, 2.675, 0.125, -0.0, 9007199254740993.0])
        return rng.uniform(1, 10) * 10.0 ** rng.randint(-30, 30) * rng.choice([1, -1])

    def safe(f):
        try:
            return repr(f())
        except ZeroDivisionError:
            return "Z"

    ops = [
        ("{{ a }}|{{ b }}", lambda a, b: f"{a!r}|{b!r}"),
        ("{{ [a + b, a - b, a * b, -a, a|abs, a < b, a == b, a <= b] }}",
         lambda a, b: repr([a + b, a - b, a * b, -a, abs(a), a < b, a == b, a <= b])),
        ("{{ a / b if b else 'Z' }}|{{ a // b if b else 'Z' }}|{{ a % b if b else 'Z' }}",
         lambda a, b: f"{safe(lambda: a / b)}|{safe(lambda: a // b)}|{safe(lambda: a % b)}"),
        ("{{ a|round(3) }}|{{ a|round }}|{{ a|float }}|{{ a|tojson }}|{{ a|string }}",
         lambda a, b: f"{round(a, 3)!r}|{round(a, 0)!r}|{float(a)!r}|{json.dumps(a)}|{a}"),
        ("{{ '%.3f|%e|%g|%10.2f|%-+8.1e' % (a, a, a, a, a) }}",
         lambda a, b: "%.3f|%e|%g|%10.2f|%-+8.1e" % (a, a, a, a, a)),
        ("{{ '{:.2f}|{:e}|{:g}|{}|{:+.1%}|{:,.2f}|{:>12.4g}'.format(a, a, a, a, a, a, a) }}",
         lambda a, b: "{:.2f}|{:e}|{:g}|{}|{:+.1%}|{:,.2f}|{:>12.4g}".format(a, a, a, a, a, a, a)),
    ]
    recs = [{"a": rnum(), "b": rnum()} for _ in range(400)]
    return recs, "{% set a = m.a %}{% set b = m.b %}", ops, lambda rec, f: f(rec["a"], rec["b"])


def nested(rng):
    atoms = [None, True, False, 0, -1, 7, 10**15, 2.5, -0.0, 1e-7, 1e20, 0.1, "", "a", "é中😀",
             "q\"\\/\n\t\x01\x7f\u2028", "k'", "Σ"]

    def rv(d=0):
        k = rng.random()
        if d > 4 or k < 0.45:
            return rng.choice(atoms)
        if k < 0.7:
            return [rv(d + 1) for _ in range(rng.randint(0, 4))]
        return {rng.choice(["b", "a", "z", "é", "k1", "A", "_", "10"]) + str(rng.randint(0, 3)): rv(d + 1)
                for _ in range(rng.randint(0, 4))}

    ops = [
        ("{{ v|tojson }}", lambda v: json.dumps(v, ensure_ascii=False)),
        ("{{ v|tojson(indent=2) }}", lambda v: json.dumps(v, ensure_ascii=False, indent=2)),
        ("{{ v|tojson(indent='\\t', sort_keys=true) }}", lambda v: json.dumps(v, ensure_ascii=False, indent="\t", sort_keys=True)),
        ("{{ v|tojson(separators=(',', ':')) }}", lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))),
        ("{{ v|tojson(ensure_ascii=true, indent=0) }}", lambda v: json.dumps(v, indent=0)),
        ("{{ v }}", str),
    ]
    return [{"v": rv()} for _ in range(300)], "{% set v = m.v %}", ops, lambda rec, f: f(rec["v"])


def main():
    mode, seed, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    recs, prologue, ops, apply = {"str": strings, "num": numbers, "json": nested}[mode](random.Random(seed))
    with open(os.path.join(out, "conv.json"), "w") as f:
        json.dump({"messages": recs}, f)
    with open(os.path.join(out, "t.jinja"), "w") as f:
        f.write("{% for m in messages %}" + prologue + SEP.join(o[0] for o in ops) + END + "{% endfor %}")
    with open(os.path.join(out, "want.txt"), "w", encoding="utf-8") as f:
        f.write("".join(SEP.join(apply(r, o[1]) for o in ops) + END for r in recs))


main()
