"""TEMPORARY (issue 24 in progress): the old module path; removed once every importer is updated."""

from attnmt.data.test_sets import config_test_sets  # noqa: F401
from attnmt.pairs.evaluation import classification_report, format_classification_report  # noqa: F401
from attnmt.translation.evaluation import *  # noqa: F401,F403
from attnmt.translation.evaluation import attention_failures, joined, score_translations  # noqa: F401
