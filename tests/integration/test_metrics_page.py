"""metrics_page.py's MetricsPage.flat(), the dict the fault tests and the compatibility suite
read: every series, or with flat(label=value) one label set, keyed without those labels.
Needs no broker and no proxy.
"""
import unittest

import metrics_page

PAGE = """\
# HELP nackguard_returns_total Returns.
# TYPE nackguard_returns_total counter
nackguard_returns_total{queue="a"} 4
nackguard_returns_total{queue="b"} 1
# HELP nackguard_dead_letters_total Dead-letters.
# TYPE nackguard_dead_letters_total counter
nackguard_dead_letters_total{queue="a",reason="crash_loop"} 1
nackguard_dead_letters_total{reason="max_redeliveries",queue="a"} 2
nackguard_dead_letters_total{queue="a\\"b",reason="x"} 3
# HELP nackguard_connections Open connections.
# TYPE nackguard_connections gauge
nackguard_connections 7
"""


class FlatTest(unittest.TestCase):
    def setUp(self):
        self.page = metrics_page.parse_metrics(PAGE)

    def test_every_series_with_its_labels_in_page_order(self):
        self.assertEqual(self.page.flat(), {
            'nackguard_returns_total{queue="a"}': 4.0,
            'nackguard_returns_total{queue="b"}': 1.0,
            'nackguard_dead_letters_total{queue="a",reason="crash_loop"}': 1.0,
            'nackguard_dead_letters_total{reason="max_redeliveries",queue="a"}': 2.0,
            'nackguard_dead_letters_total{queue="a\\"b",reason="x"}': 3.0,
            "nackguard_connections": 7.0,
        })

    def test_one_label_set_keyed_without_its_labels(self):
        # A series whose only label was the filter's is keyed by its bare name.
        self.assertEqual(self.page.flat(queue="a"), {
            "nackguard_returns_total": 4.0,
            'nackguard_dead_letters_total{reason="crash_loop"}': 1.0,
            'nackguard_dead_letters_total{reason="max_redeliveries"}': 2.0,
        })

    def test_several_labels_must_all_match(self):
        self.assertEqual(self.page.flat(queue="a", reason="max_redeliveries"),
                         {"nackguard_dead_letters_total": 2.0})
        self.assertEqual(self.page.flat(queue="b", reason="crash_loop"), {})

    def test_a_filter_value_is_matched_unescaped_and_the_rest_stays_escaped(self):
        self.assertEqual(self.page.flat(queue='a"b'),
                         {'nackguard_dead_letters_total{reason="x"}': 3.0})
        self.assertEqual(self.page.flat(reason="x"),
                         {'nackguard_dead_letters_total{queue="a\\"b"}': 3.0})

    def test_a_label_no_series_has_matches_nothing(self):
        self.assertEqual(self.page.flat(queue="c"), {})
        self.assertEqual(self.page.flat(vhost="/"), {})


if __name__ == "__main__":
    unittest.main()
