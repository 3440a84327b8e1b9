import re
from itertools import groupby


def encode(text):
    out = []
    for char, run in groupby(text):
        count = len(list(run))
        out.append((str(count) if count > 1 else "") + char)
    return "".join(out)


def decode(text):
    return "".join(char * int(count or 1) for count, char in re.findall(r"(\d*)(\D)", text))
