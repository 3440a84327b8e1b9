NUMERALS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]


def to_roman(n):
    out = []
    for value, symbol in NUMERALS:
        count, n = divmod(n, value)
        out.append(symbol * count)
    return "".join(out)
