// Debian 12's Boost 1.81 packages no compiled Boost.JSON library, so it is built here in its
// header-only mode, in this one file, for every user of Boost.JSON (the replay's report,
// /status.json and `nackguard status`).

#include <boost/json/src.hpp>
