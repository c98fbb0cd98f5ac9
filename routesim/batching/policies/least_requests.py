"""least_requests (token-model.md §5): the argmin of o_i, the outstanding requests (scores.score_nb), ties by the
largest hit, then the tie hash."""

from ..dtypes import Score

NAME = "least_requests"
CODE = 2
ALIASES = ("least_queue",)
PARAMS = ()
DRAWS = 0
RULE = "argmin"
SCORE = Score.REQUESTS
SLOW_START = True
