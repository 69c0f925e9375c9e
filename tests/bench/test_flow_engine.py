"""The real-engine flow benchmark's arithmetic: Jain's index and the fairness report."""

import pytest

from bench.flow_engine import jain_index, report


def test_jain_index_is_one_for_an_even_split_and_falls_with_the_skew():
    assert jain_index([500, 500]) == 1.0
    # 10:1 → (11)^2 / (2 * 101)
    assert jain_index([10, 1]) == pytest.approx(121 / 202)
    assert jain_index([0, 0]) == 0.0


def test_fairness_report_gives_each_round_and_mode_its_ratio():
    result = {
        "scenario": "fairness",
        "slots": 4,
        "duration_s": 60,
        "load": (1.0, 2.0, 3.0),
        "rounds": [
            {
                "flow": {"tokens": {"heavy": 1200, "light": 1000}, "refused": {"heavy": 0, "light": 0},
                         "heavy_to_light": 1.2, "jain": 0.992},
                "no-flow": {"tokens": {"heavy": 5000, "light": 500}, "refused": {"heavy": 0, "light": 0},
                            "heavy_to_light": 10.0, "jain": 0.599},
            }
        ],
    }
    text = report(result)
    assert "| 1 | flow | 1,200 | 1,000 | 1.20 | 0.992 | 0/0 |" in text
    assert "| 1 | no-flow | 5,000 | 500 | 10.00 | 0.599 | 0/0 |" in text
