// `nackguard status`'s tables from a /status.json document.

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include "proxy/status/status_cli.hpp"

namespace nackguard::status {
namespace {

constexpr const char* kDocument = R"({
  "nackguard": {"version": "1.2.3", "host": "pod-7", "started_at": "2026-12-03T10:00:00.000Z",
                "now": "2026-12-03T10:05:00.123Z"},
  "config": {"file": "/etc/ng.yaml", "policies_dir": "/etc/policies", "policies": 2,
             "show_identities": false, "reloads": {"ok": 1, "error": 0},
             "last_reload": {"at": "2026-12-03T10:01:00.000Z", "result": "ok", "message": ""}},
  "limits": {"tracker_entries": 12, "tracker_max_entries": 100000, "tracker_evictions": 0,
             "retained_body_bytes": 2048, "retained_body_bytes_limit": 268435456,
             "retained_body_refusals": 0, "client_connections": 3, "queues": 1,
             "max_queue_labels": 100},
  "window_seconds": 300,
  "queues": [{"queue": "orders\u001b[2J", "window": {"deliveries": 120, "returns": 15,
              "returns_became": {"forwarded": 10, "delayed": 4, "dead_lettered": 1,
                                 "republished": 0},
              "dead_letters": {"max_redeliveries": 1, "crash_loop": 0,
                               "broker_delivery_limit": 0, "consumer_timeout": 0},
              "fallbacks": 0, "ack_timeouts": 0},
              "total": {}, "outage": true, "outage_ratio": 0.75, "policy": "p.yaml"}],
  "top": [{"id": "0123456789ab", "queue": "orders", "returns": 14, "deliveries": 15,
           "first_return": "2026-12-03T10:00:01.000Z", "last_return": "2026-12-03T10:04:59.000Z",
           "crash_suspect": false,
           "next": {"action": "delay", "when": "next_return", "delay_ms": 5000}},
          {"id": "ba9876543210", "queue": null, "identity": "order-9", "returns": 2,
           "deliveries": 2, "first_return": null, "last_return": null, "crash_suspect": false,
           "next": null}],
  "tracker_sampled": 12
})";

TEST(StatusText, TablesOfTheDocument) {
  const std::string out = render_text(boost::json::parse(kDocument));
  EXPECT_EQ(out.rfind("nackguard 1.2.3 on pod-7, started 2026-12-03 10:00:00, now 2026-12-03 "
                      "10:05:00\n",
                      0),
            0u)
      << out;
  EXPECT_NE(out.find("last reload: 2026-12-03 10:01:00 ok\n"), std::string::npos) << out;
  EXPECT_NE(out.find("limits: tracker 12 of 100000 entries (0 evicted); retained bodies 2048 of "
                     "268435456 bytes; 3 client connections\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("QUEUES (last 300 s)\n"), std::string::npos);
  // A control character in a name is escaped, never written to the terminal.
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_NE(out.find("orders\\x1b[2J  120         15       10        4        0            "
                     "max_redeliveries 1  0          yes (0.75)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("orders       #0123456789ab  14       15          2026-12-03 10:00:01  "
                     "2026-12-03 10:04:59  delay 5000 ms\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("(forgotten)  order-9        2        2"), std::string::npos) << out;
}

TEST(StatusText, AnEmptyDocumentGivesEmptyTables) {
  const std::string out = render_text(boost::json::parse("{}"));
  EXPECT_NE(out.find("TOP MESSAGES (by returns)\nQUEUE  MESSAGE  RETURNS"), std::string::npos)
      << out;
}

TEST(StatusFetch, SaysWhatToCheckWhenNothingAnswers) {
  try {
    fetch("http://127.0.0.1:1/status.json", std::chrono::milliseconds(2000));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot connect to 127.0.0.1:1"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("metrics.port"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fetch("https://host/status.json", std::chrono::milliseconds(100)),
               std::runtime_error);
  EXPECT_THROW(fetch("not a url", std::chrono::milliseconds(100)), std::runtime_error);
}

}  // namespace
}  // namespace nackguard::status
