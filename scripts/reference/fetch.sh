#!/usr/bin/env bash
# Fetches the reference parts from Maven Central (and the Go module proxy) into a cache outside the
# repository, pinned: Apache RocketMQ's NameServer/Broker/Proxy/mqadmin jars (rocketmq/pom.xml) and, once
# built, the official Java and Go client programs of tests/reference/. Prints the cache's path.
# Idempotent: a part whose stamp is newer than its recipe is left as it is.
#   bash scripts/reference/fetch.sh          RocketMQ and the client programs (the reference suite)
#   bash scripts/reference/fetch.sh kafka    Apache Kafka's broker alone (kafka/pom.xml; a bench/compare peer)
#   bash scripts/reference/fetch.sh loadgen  bench/compare's Java load generator (bench/compare/jvm/loadgen)
#   bash scripts/reference/fetch.sh spark-kafka  Spark's Kafka connector (spark-kafka/pom.xml; bench/spark_bench.py)
#   TIDALMQ_REFERENCE_CACHE  where the parts go (default ~/.cache/tidalmq/reference)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${TIDALMQ_REFERENCE_CACHE:-$HOME/.cache/tidalmq/reference}"
mkdir -p "$cache"
for tool in java mvn; do
  command -v "$tool" >/dev/null || { echo "reference: $tool not found (Java 17 and Maven are needed)" >&2; exit 3; }
done
mvn_q() { mvn -q -B -ntp -Dstyle.color=never "$@"; }

# copy_deps POM DIR: the POM's dependencies into DIR/lib (java -cp 'DIR/lib/*'), unless DIR is newer than POM
copy_deps() {
  if [ ! -f "$2/.fetched" ] || [ "$1" -nt "$2/.fetched" ]; then
    rm -rf "$2.tmp"
    mvn_q -f "$1" dependency:copy-dependencies -DoutputDirectory="$2.tmp/lib" >&2
    rm -rf "$2"
    mv "$2.tmp" "$2"
    touch "$2/.fetched"
  fi
}

# build_jvm SRC OUT: the Maven project SRC (SRC/pom.xml) built into OUT/{target,lib}, unless nothing in SRC
# is newer than OUT's stamp
build_jvm() {
  local newest
  newest="$(find "$1" -type f -newer "$2/.built" 2>/dev/null | head -1 || true)"
  if [ ! -f "$2/.built" ] || [ -n "$newest" ]; then
    rm -rf "$2"
    mkdir -p "$2"
    mvn_q -f "$1/pom.xml" -DbuildDir="$2/target" package dependency:copy-dependencies \
      -DoutputDirectory="$2/lib" -DincludeScope=runtime -DskipTests >&2
    touch "$2/.built"
  fi
}

if [ "${1:-}" = loadgen ]; then
  build_jvm "$repo/bench/compare/jvm/loadgen" "$cache/jvm-bench/loadgen"
  echo "$cache"
  exit 0
fi

if [ "${1:-}" = spark-kafka ]; then
  sversion="$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' "$here/spark-kafka/pom.xml")"
  copy_deps "$here/spark-kafka/pom.xml" "$cache/spark-kafka-$sversion"
  echo "$cache"
  exit 0
fi

if [ "${1:-}" = kafka ]; then
  kversion="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/kafka/pom.xml")"
  copy_deps "$here/kafka/pom.xml" "$cache/kafka-$kversion"
  echo "$cache"
  exit 0
fi

# Apache RocketMQ: its jars and their dependencies, one directory (java -cp 'lib/*').
version="$(sed -n 's:.*<rocketmq.version>\(.*\)</rocketmq.version>.*:\1:p' "$here/rocketmq/pom.xml")"
copy_deps "$here/rocketmq/pom.xml" "$cache/rocketmq-$version"

# The official Java clients' programs, one Maven project a client (tests/reference/jvm/NAME/pom.xml: their
# dependencies clash, e.g. rocketmq-client 4.9 and the Spring starter's 5.x): built into the cache, not the
# work tree, each as cache/jvm/NAME/{classes,lib}.
for pom in "$repo"/tests/reference/jvm/*/pom.xml; do
  [ -f "$pom" ] || continue
  src="$(dirname "$pom")"
  build_jvm "$src" "$cache/jvm/$(basename "$src")"
done

# The official Go client's programs (tests/reference/go), built with the module cache of the machine.
go_src="$repo/tests/reference/go"
if [ -f "$go_src/go.mod" ] && command -v go >/dev/null; then
  out="$cache/go-clients"
  newest="$(find "$go_src" -type f -newer "$out/.built" 2>/dev/null | head -1 || true)"
  if [ ! -f "$out/.built" ] || [ -n "$newest" ]; then
    mkdir -p "$out/bin"
    (cd "$go_src" && GOFLAGS=-mod=mod go build -o "$out/bin/" ./...) >&2
    touch "$out/.built"
  fi
fi
echo "$cache"
