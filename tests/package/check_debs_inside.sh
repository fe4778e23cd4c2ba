#!/bin/bash
# Run by check_debs.sh inside a fresh Debian 12 root, with the .debs in
# /debs and this script and pt-plain (a pthread program) in /check.
set -u
export DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8
fails=0
ok()   { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ours="strata libstrata0 libstrata-dev strata-dkms libstrata-sqlite strata-jvm"
debs=$(ls /debs/*.deb)
# What the packages pull from Debian goes in first, so that the file lists
# before and after compare our packages alone.
deps=$(apt-get install -s --no-install-recommends $debs 2> /dev/null | sed -n 's/^Inst \([^ ]*\) .*/\1/p' |
	grep -vxE "$(echo $ours | tr ' ' '|')")
# Kernel headers for DKMS: the second newest Debian kernel ABI goes in
# with the dependencies (a machine's installed kernel); the newest comes
# after the packages, as a kernel upgrade does.  amd64 only.
hdrs=$(apt-cache search --names-only '^linux-headers-[0-9.]+-[0-9]+-amd64$' 2> /dev/null | cut -d' ' -f1 | sort -V)
kold=$(echo "$hdrs" | tail -n 2 | head -n 1) knew=$(echo "$hdrs" | tail -n 1)
[ "$kold" = "$knew" ] && knew=""
apt-get install -y -qq --no-install-recommends $deps $kold > /tmp/deps.log 2>&1 || { cat /tmp/deps.log; fail "the dependencies install"; }
kold=${kold#linux-headers-} knew=${knew#linux-headers-}
files() {
	find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /tmp -o -path /run -o -path /check \
		-o -path /debs -o -path /var/cache -o -path /var/lib/apt -o -path /var/lib/dpkg -o -path /var/log \) -prune \
		-o -print | sort
}
files > /check/before.txt
if apt-get install -y -qq --no-install-recommends $debs > /tmp/install.log 2>&1; then
	ok "apt install ./*.deb ($(echo $debs | wc -w) packages)"
else
	cat /tmp/install.log; fail "apt install ./*.deb"
fi

# The bundled example with the installed tools.
cd /tmp
demo=/usr/lib/strata/examples/strata-demo
if strata record -o /tmp/tr-demo -- "$demo" --threads 2 --events 100 > /tmp/demo.log 2>&1; then
	ok "strata record -- strata-demo"
else
	cat /tmp/demo.log; fail "strata record -- strata-demo"
fi
babeltrace2 /tmp/tr-demo > /tmp/demo.txt 2> /tmp/bt.err
ints=$(grep -c ' demo:ints: ' /tmp/demo.txt) mix=$(grep -c ' demo:mix: ' /tmp/demo.txt)
[ "$ints" = 100 ] && [ "$mix" = 100 ] && [ ! -s /tmp/bt.err ] \
	&& ok "babeltrace2 reads the demo's trace: 100 demo:ints, 100 demo:mix (2 threads x 100)" \
	|| { cat /tmp/bt.err; fail "babeltrace2: 100 demo:ints and 100 demo:mix (got $ints, $mix)"; }

# A pthread program through the preload; analyze mutex.
if strata record --preload pthread -o /tmp/tr-pt -- /check/pt-plain 500 > /tmp/pt.log 2>&1; then
	ok "strata record --preload pthread"
else
	cat /tmp/pt.log; fail "strata record --preload pthread"
fi
got=$(babeltrace2 /tmp/tr-pt 2> /tmp/bt2.err | awk '/pthread:mutex_(lock|held|acquired):/ { n++ }
	/pthread:mutex_counts:/ { if (match($0, / count = [0-9]+/)) n += substr($0, RSTART + 9, RLENGTH - 9) }
	END { print n + 0 }')
[ "$got" -eq 1000 ] && ok "babeltrace2: 1000 mutex acquisitions (2 threads x 500)" \
	|| { cat /tmp/bt2.err; fail "babeltrace2: 1000 mutex acquisitions (got $got)"; }
if strata analyze mutex /tmp/tr-pt > /tmp/an.txt 2>&1 && [ -s /tmp/an.txt ]; then
	ok "strata analyze mutex ($(wc -l < /tmp/an.txt) lines)"
else
	cat /tmp/an.txt; fail "strata analyze mutex"
fi
man -w strata-record > /dev/null 2>&1 && ok "man -w strata-record: $(man -w strata-record)" || fail "man -w strata-record"
man -w strata-consumerd > /dev/null 2>&1 && ok "man -w strata-consumerd" || fail "man -w strata-consumerd"
got=$(printf '.load libstrata-sqlite\nSELECT strata_open(%s) > 0;\n%s\n' "'/tmp/tr-demo'" \
	"SELECT count(*) FROM events WHERE name IN ('demo:ints', 'demo:mix');" | sqlite3 2>&1 | tail -n 1)
[ "$got" = 200 ] && ok "sqlite3 .load libstrata-sqlite (bare name): the 200 demo events" \
	|| fail "sqlite3 .load libstrata-sqlite: 200 demo events (got '$got')"
# DKMS built and installed the module for the installed kernel's headers,
# and builds it again when another kernel's headers arrive (its
# header_postinst.d hook), as a kernel upgrade does.
dkms_has() { # KVER: strata.ko installed for KVER, for that kernel
	dkms status -k "$1" strata 2> /dev/null | grep -q ': installed' &&
		modinfo -F vermagic "/lib/modules/$1/updates/dkms/strata.ko" 2> /dev/null | grep -q "^$1 "
}
if [ -z "$kold" ]; then
	fail "no linux-headers-*-amd64 in the apt sources: dkms not checked"
elif dkms_has "$kold"; then
	ok "strata-dkms: dkms built and installed strata.ko for $kold ($(dkms status strata | head -n 1))"
else
	dkms status; ls /var/lib/dkms/strata/*/build/make.log > /dev/null 2>&1 && tail -n 20 /var/lib/dkms/strata/*/build/make.log
	fail "strata-dkms: strata.ko built and installed for $kold by apt install"
fi
if [ -n "$knew" ]; then
	apt-get install -y -qq --no-install-recommends "linux-headers-$knew" > /tmp/knew.log 2>&1 || cat /tmp/knew.log
	dkms_has "$knew" && ok "a new kernel's headers (apt install linux-headers-$knew): strata.ko built for it too" ||
		{ dkms status; fail "strata.ko built by dkms for a kernel installed later ($knew)"; }
fi

# Purge: nothing of ours is left.
if apt-get purge -y -qq $(for p in $ours; do dpkg -s "$p" > /dev/null 2>&1 && echo "$p"; done) > /tmp/purge.log 2>&1; then
	ok "apt purge"
else
	cat /tmp/purge.log; fail "apt purge"
fi
for k in $kold $knew; do
	[ ! -e "/lib/modules/$k/updates/dkms/strata.ko" ] && ok "purged: no strata.ko left for $k" ||
		fail "purged: strata.ko still in /lib/modules/$k"
done
# The later kernel's headers go as they came (not ours, not in the first list).
[ -n "$knew" ] && apt-get purge -y -qq "linux-headers-$knew" "linux-headers-${knew%-amd64}-common" > /tmp/kpurge.log 2>&1
files > /check/after.txt
# Not ours, and kept by design: depmod's indexes in a kernel's module tree
# (dkms runs depmod at each install and removal; a kernel image owns them)
# and dkms's own signing key (made at its first build, kept for every
# module it signs).  Said, not hidden.
theirs='^/usr/lib/modules/[^/]+(/modules\.[a-z.]+)?$|^/var/lib/dkms/mok\.(key|pub)$'
diff /check/before.txt /check/after.txt > /tmp/left.diff
grep -E "^> " /tmp/left.diff | cut -c3- | grep -E "$theirs" > /tmp/theirs.txt
{ grep -E "^< " /tmp/left.diff; grep -E "^> " /tmp/left.diff | cut -c3- | grep -vE "$theirs" | sed 's/^/> /'; } > /tmp/ours.txt
if [ ! -s /tmp/ours.txt ]; then
	ok "after purge, the file list is the one before install (and $(wc -l < /tmp/theirs.txt) paths of depmod's and dkms's own)"
else
	cat /tmp/ours.txt; fail "files left or lost by install + purge"
fi
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
