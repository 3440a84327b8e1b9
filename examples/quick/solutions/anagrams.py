def find_anagrams(word, candidates):
    key = word.lower()
    return [c for c in candidates if c.lower() != key and sorted(c.lower()) == sorted(key)]
