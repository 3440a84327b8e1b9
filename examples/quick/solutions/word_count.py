import re
from collections import Counter


def word_count(text):
    words = (w.strip("'") for w in re.findall(r"[a-z0-9']+", text.lower()))
    return dict(Counter(w for w in words if w))
