#!/usr/bin/env bash
# Install the peers of bench/compare from Debian's packages and their Python clients from PyPI.
# Services are NOT started by the packages (policy-rc.d denies it): the harness starts each server itself,
# on loopback, with its own config and data dir in a temp dir.
# A package missing from the configured Debian repositories is reported and skipped (the run then says
# "not available from Debian here" for that peer).
set -u
cd "$(dirname "$0")/../.."
# a JDK and Maven: the JVM peers (RocketMQ, Kafka) and the Java load generator are built and fetched by Maven
PKGS="redis-server rabbitmq-server activemq beanstalkd nats-server openjdk-17-jdk-headless maven"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if command -v apt-get >/dev/null; then
  $SUDO apt-get update -qq || true
  want=""
  for p in $PKGS; do
    # installed already: left as it is (not upgraded under other users of the machine)
    dpkg -s "$p" >/dev/null 2>&1 && continue
    cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
      echo "install.sh: $p is not available from Debian here; skipped"
    else
      want="$want $p"
    fi
  done
  if [ -n "$want" ]; then
    # keep the packages' init scripts from starting system-wide services
    restore=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
      $SUDO chmod +x /usr/sbin/policy-rc.d
      restore=1
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $want
    [ -n "$restore" ] && $SUDO rm -f /usr/sbin/policy-rc.d
  fi
else
  echo "install.sh: no apt-get; install $PKGS yourself"
fi
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
"$PY" -m pip install -q -e '.[bench,compare]'
# Apache RocketMQ 5 and Apache Kafka from Maven Central into the reference cache, and the Java load generator
# built there (needs java and mvn)
if command -v java >/dev/null && command -v mvn >/dev/null; then
  bash scripts/reference/fetch.sh >/dev/null && bash scripts/reference/fetch.sh kafka >/dev/null \
    && bash scripts/reference/fetch.sh loadgen >/dev/null
else
  echo "install.sh: no java/mvn; the rocketmq, kafka and *_java peers are skipped"
fi
