"""The subscription index: a token trie with wildcards, queue groups and a result cache."""

from pynatsd.matcher.errors import InvalidSubjectError
from pynatsd.matcher.result import MatchResult, SublistStats, Subscriber, combine_stats
from pynatsd.matcher.sublist import Sublist

__all__ = ["InvalidSubjectError", "MatchResult", "Sublist", "SublistStats", "Subscriber", "combine_stats"]
