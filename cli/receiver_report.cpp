// receiver_report.cpp - what the Receiver of receiver.h tells at the end:
// the frames, packets and events received and lost, per stream, and the
// sub-traces left on the sender's clock.
#include "receiver.h"

#include <cinttypes>

namespace strata {
namespace receive {

void Receiver::report(FILE *o, const serial::DecodeStats &ds)
{
	uint64_t pkts = 0, lost_p = 0, lost_e = 0;
	for (auto &kv : traces_)
		for (auto &l : kv.second.lanes) {
			pkts += l.second.written;
			lost_p += l.second.lost_pkts;
			lost_e += l.second.lost_events;
		}
	fprintf(o,
		"strata receive: %llu frame(s) good, %llu with a bad CRC, %llu malformed, %llu oversized "
		"(%llu byte(s) rejected); %llu packet(s) written; %llu frame(s) lost (sequence gaps); %llu "
		"packet(s) dropped waiting for metadata\n",
		(unsigned long long)ds.frames, (unsigned long long)ds.bad_crc,
		(unsigned long long)ds.malformed, (unsigned long long)ds.oversized,
		(unsigned long long)ds.bad_bytes, (unsigned long long)pkts,
		(unsigned long long)seq_.lost_total(), (unsigned long long)dropped_held_);
	fprintf(o,
		"strata receive: %llu packet(s) and %llu event(s) missing, each marked in the trace where it "
		"was (lost on the line, refused by the sender, or dropped here)\n",
		(unsigned long long)lost_p, (unsigned long long)lost_e);
	if (ds.other_version)
		fprintf(o,
			"strata receive: %llu frame(s) of wire format version %u ignored: this receiver "
			"reads "
			"version %u (use the strata of the sender's release)\n",
			(unsigned long long)ds.other_version, ds.version_seen, serial::kVersion);
	report_streams(o);
	report_clocks(o);
	if (unknown_)
		fprintf(o, "  %llu frame(s) of a kind this receiver does not know skipped\n",
			(unsigned long long)unknown_);
	if (bad_packets_ || bad_meta_)
		fprintf(o,
			"  %llu packet frame(s) and %llu other frame(s) with a good CRC but bad contents "
			"ignored\n",
			(unsigned long long)bad_packets_, (unsigned long long)bad_meta_);
}

// Per stream: frames received and lost, packets and events missing.
void Receiver::report_streams(FILE *o)
{
	for (auto &kv : frames_) {
		const uint16_t id = kv.first.first, stream = kv.first.second;
		auto t = traces_.find(id);
		const std::string name =
			t != traces_.end() && t->second.announced ? t->second.path : "#" + std::to_string(id);
		if (id == serial::kMetaStream) { // kFile: the trace's top
			fprintf(o, "  clocks.json: %llu frame(s), %llu lost\n", (unsigned long long)kv.second,
				(unsigned long long)seq_.lost(id, stream));
			continue;
		}
		const std::string what =
			stream == serial::kMetaStream
				? "metadata"
				: (t != traces_.end() ? t->second.channel : std::string("lane")) + "_" +
					  std::to_string(stream);
		fprintf(o, "  %s/%s: %llu frame(s), %llu lost", name.c_str(), what.c_str(),
			(unsigned long long)kv.second, (unsigned long long)seq_.lost(id, stream));
		if (stream != serial::kMetaStream && t != traces_.end()) {
			const SubTrace &st = t->second;
			auto l = st.lanes.find(stream);
			const uint64_t got = l != st.lanes.end() ? l->second.written : 0;
			if (st.ended) {
				auto e = st.end.find(stream);
				const uint64_t offered = e != st.end.end() ? e->second.packets : 0;
				fprintf(o,
					"; %llu packet(s) offered by the sender, %llu written, %llu missing",
					(unsigned long long)offered, (unsigned long long)got,
					(unsigned long long)(offered > got ? offered - got : 0));
			}
			if (l != st.lanes.end())
				fprintf(o, "; %llu event(s) missing",
					(unsigned long long)l->second.lost_events);
		}
		fputc('\n', o);
	}
	// Sub-traces whose end came: lanes that sent packets none of which
	// arrived have no line above.
	for (auto &kv : traces_)
		for (auto &e : kv.second.end)
			if (e.second.packets && !frames_.count({kv.first, e.first})) {
				auto l = kv.second.lanes.find(e.first);
				fprintf(o,
					"  %s/%s_%u: 0 frame(s); %llu packet(s) offered by the sender, 0 "
					"written, %llu missing; %llu event(s) missing\n",
					kv.second.path.c_str(), kv.second.channel.c_str(), e.first,
					(unsigned long long)e.second.packets,
					(unsigned long long)e.second.packets,
					(unsigned long long)(l != kv.second.lanes.end()
								     ? l->second.lost_events
								     : 0));
			}
}

// What became of a clock follower's rewrite (docs/clocks.md, "Serial followers").
void Receiver::report_clocks(FILE *o)
{
	// A clock follower's sub-traces (docs/clocks.md, "Serial followers").
	size_t corr = 0, own = 0, waiting = 0;
	for (auto &kv : traces_) {
		const SubTrace &t = kv.second;
		if (t.rewritten)
			(t.rw_correlated ? corr : own)++;
		else if (t.written && t.text.find("\tsync_serial = ") != std::string::npos)
			waiting++;
	}
	const bool json = files_.count("clocks.json") && files_["clocks.json"].applied;
	if (corr || own)
		fprintf(o,
			"strata receive: %zu sub-trace(s) put onto the sender's clock reference's clock at "
			"its "
			"stop (clocks.json %s), %zu rewritten on its own clock (no map)\n",
			corr, json ? "written" : "MISSING", own);
	if (waiting)
		fprintf(o,
			"strata receive: %zu sub-trace(s) stay on the sender's own clock: it follows a clock "
			"link, but the line ended before its stop sent their rewrite (their metadata say "
			"sync_state = \"uncorrelated\")\n",
			waiting);
}

} // namespace receive
} // namespace strata
