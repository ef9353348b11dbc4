#pragma once
// `nackguard status [--url URL] [--watch]`: the /status tables in a terminal, read from a
// running proxy's /status.json, like `kubectl top`.

#include <boost/json/value.hpp>
#include <chrono>
#include <string>

namespace nackguard::status {

// The subcommand's entry point; argv[0] is "status". Returns 0, 1 when the proxy cannot be
// read, 2 for a wrong command line.
int main(int argc, char** argv);

// What GET `url` answers: the body of a 200, else throws std::runtime_error saying what failed
// and what to check. `url` is http://HOST[:PORT][/PATH]; with no path, /status.json.
std::string fetch(const std::string& url, std::chrono::milliseconds timeout);

// The tables for a /status.json document. Control characters in names are escaped.
std::string render_text(const boost::json::value& status);

}  // namespace nackguard::status
