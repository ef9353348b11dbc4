#pragma once
// The session's vocabulary that the guard speaks at the seam (proxy/session/observer.hpp,
// takeover.hpp): deliveries in, TakeOvers and settlements out.

#include "proxy/session/delivery.hpp"
#include "proxy/session/observer.hpp"
#include "proxy/session/proxy_channel.hpp"
#include "proxy/session/takeover.hpp"

namespace nackguard::guard {

using session::ConnectionFacts;
using session::Delivery;
using session::DeliveryPlan;
using session::Outcome;
using session::PublishRequest;
using session::QueueNotice;
using session::QueueSpec;
using session::ReturnAction;
using session::ReturnCause;
using session::ReturnContext;
using session::ReturnDecision;
using session::SessionObserver;
using session::Settle;
using session::SettleKind;
using session::TakeOver;
using session::Ticket;

}  // namespace nackguard::guard
