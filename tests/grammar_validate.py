#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Independent check of structured output: reads JSON lines {"schema": S, "text": T}
# (file named on the command line), and for each requires that T parses as JSON
# (Python's json module, strict: no NaN/Infinity) and validates against S with
# python3-jsonschema (the validator S's $schema names, Draft 2020-12 otherwise).
# Exit 0: all valid; 1: some invalid (each printed); 77: python3-jsonschema missing.
import json
import sys

try:
    import jsonschema
except ImportError:
    sys.exit(77)


def reject_constant(name):
    raise ValueError("not JSON: " + name)


def main(path):
    bad = 0
    total = 0
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            total += 1
            rec = json.loads(line)
            schema, text = rec["schema"], rec["text"]
            try:
                value = json.loads(text, parse_constant=reject_constant)
            except ValueError as e:
                print(f"line {line_no}: output is not JSON ({e}): {text!r}")
                bad += 1
                continue
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            errors = list(cls(schema).iter_errors(value))
            if errors:
                print(f"line {line_no}: output does not validate: {errors[0].message}: {text!r}")
                bad += 1
    print(f"grammar_validate: {total - bad}/{total} outputs valid")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
