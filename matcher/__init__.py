"""The subscription index: a token trie with wildcards, queue groups and a result cache."""
