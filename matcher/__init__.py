"""The subscription index: a token trie with wildcards, queue groups and a result cache."""

from matcher.errors import InvalidSubjectError
from matcher.result import MatchResult, SublistStats, Subscriber, combine_stats
from matcher.sublist import Sublist

__all__ = ["InvalidSubjectError", "MatchResult", "Sublist", "SublistStats", "Subscriber", "combine_stats"]
