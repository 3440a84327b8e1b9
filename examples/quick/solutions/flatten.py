def flatten(items):
    out = []
    for item in items:
        if isinstance(item, list):
            out.extend(flatten(item))
        elif item is not None:
            out.append(item)
    return out
