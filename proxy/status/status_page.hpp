#pragma once
// GET /status: one self-contained HTML page (no external assets, so that it works offline and
// through `kubectl port-forward`) that fetches status.json every few seconds and redraws its
// tables in place. Queue names and identities are set as text, never as HTML.

#include <string_view>

namespace nackguard::status {

// Seconds between two refreshes of the page.
inline constexpr int kPageRefreshSeconds = 3;

std::string_view status_page();

}  // namespace nackguard::status
