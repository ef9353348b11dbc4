// Registry::render: the Prometheus text format 0.0.4. Per metric one HELP and one TYPE line,
// then its samples. Metrics come in the order of metric_list.hpp, queues sorted by name with
// "_other" last, fixed label values in the order of their lists; every series of a queue that
// has been seen is rendered, zeros included, so rates over it never have gaps.

#include "proxy/metrics/registry.hpp"
#include "proxy/metrics/registry_family.hpp"
#include "proxy/metrics/text_format.hpp"

namespace nackguard::metrics {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// The value of the fixed label at `position` in the series `fixed_index` of `def`: fixed
// labels are the digits of fixed_index, the last label varying fastest.
// `addresses` are the address label's values.
std::span<const std::string_view> values_of(MetricLabel label,
                                            std::span<const std::string_view> addresses) {
  const LabelDef def = label_def(label);
  return def.kind == LabelKind::address ? addresses : def.values;
}

std::string_view fixed_value(const MetricDef& def, std::size_t position, std::size_t fixed_index,
                             std::span<const std::string_view> addresses) {
  std::size_t stride = 1;
  for (std::size_t i = position + 1; i < def.label_count; ++i) {
    const LabelDef later = label_def(def.labels[i]);
    if (later.kind == LabelKind::fixed || later.kind == LabelKind::address) {
      stride *= values_of(def.labels[i], addresses).size();
    }
  }
  const auto values = values_of(def.labels[position], addresses);
  return values[(fixed_index / stride) % values.size()];
}

void append_series_name(std::string& out, const MetricDef& def, std::string_view queue,
                        std::size_t fixed_index, std::string_view version,
                        std::span<const std::string_view> addresses) {
  out += def.name;
  if (def.label_count == 0) return;
  out += '{';
  for (std::size_t i = 0; i < def.label_count; ++i) {
    const LabelDef label = label_def(def.labels[i]);
    if (i != 0) out += ',';
    out += label.name;
    out += "=\"";
    switch (label.kind) {
      case LabelKind::queue:
        append_label_value(out, queue);
        break;
      case LabelKind::constant:
        append_label_value(out, version);
        break;
      case LabelKind::fixed:
      case LabelKind::address:
        append_label_value(out, fixed_value(def, i, fixed_index, addresses));
        break;
    }
    out += '"';
  }
  out += '}';
}

void append_header(std::string& out, const MetricDef& def) {
  out += "# HELP ";
  out += def.name;
  out += ' ';
  append_help(out, def.help);
  out += "\n# TYPE ";
  out += def.name;
  out += ' ';
  out += prometheus_type(def.type);
  out += '\n';
}

}  // namespace

std::string Registry::render() const {
  const std::vector<QueueLabels::Entry> queues = queues_.snapshot();
  std::string out;
  out.reserve(4096 + queues.size() * 1024);
  for (const auto& family : families_) {
    append_header(out, *family->def);
    switch (family->def->type) {
      case MetricType::counter:
      case MetricType::gauge:
        render_family(out, *family, queues);
        break;
      case MetricType::histogram:
        render_histogram(out, *family);
        break;
      case MetricType::counter_source:
      case MetricType::gauge_source: {
        std::lock_guard lock(sources_mutex_);
        if (!family->source) break;
        out += family->def->name;
        out += ' ';
        append_value(out, family->source());
        out += '\n';
        break;
      }
    }
  }
  return out;
}

void Registry::render_family(std::string& out, const Family& family,
                             const std::vector<QueueLabels::Entry>& queues) const {
  const MetricDef& def = *family.def;
  const bool gauge = def.type == MetricType::gauge;
  const auto render_slot = [&](std::string_view queue, std::size_t queue_index) {
    for (std::size_t fixed = 0; fixed < family.fixed_count; ++fixed) {
      const std::uint64_t value =
          family.values[queue_index * family.fixed_count + fixed].load(kRelaxed);
      append_series_name(out, def, queue, fixed, options_.version, address_values_);
      out += ' ';
      if (gauge) {
        append_value(out, static_cast<std::int64_t>(value));
      } else {
        append_value(out, value);
      }
      out += '\n';
    }
  };
  if (!family.has_queue) {
    render_slot({}, 0);
    return;
  }
  for (const QueueLabels::Entry& queue : queues) render_slot(queue.name, queue.index);
}

void Registry::render_histogram(std::string& out, const Family& family) const {
  const Histogram& h = *family.histogram;
  const std::string_view name = family.def->name;
  // _count is the +Inf bucket, so the two agree even while observations race with a scrape.
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= h.bounds.size(); ++i) {
    cumulative += h.buckets[i].load(kRelaxed);
    out += name;
    out += "_bucket{le=\"";
    if (i < h.bounds.size()) {
      append_value(out, h.bounds[i]);
    } else {
      out += "+Inf";
    }
    out += "\"} ";
    append_value(out, cumulative);
    out += '\n';
  }
  out += name;
  out += "_sum ";
  append_value(out, h.sum.load(kRelaxed));
  out += '\n';
  out += name;
  out += "_count ";
  append_value(out, cumulative);
  out += '\n';
}

}  // namespace nackguard::metrics
