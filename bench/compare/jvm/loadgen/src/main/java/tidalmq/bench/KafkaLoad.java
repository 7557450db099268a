package tidalmq.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * W1's phases (throughput, paced) through Apache Kafka's own Java client, with LoadGen's arguments and
 * protocol (ready, a line on stdin, sent, done): the Kafka peer fed by a client that is not its bound.
 * Arguments: bootstrap=HOST:PORT topic=T phase=throughput|paced n= size= window=RECORDS_IN_FLIGHT rate=
 * seconds= warmup= wait_s= linger_ms= (the producer's, Kafka's default 5 when not given). The producer
 * uses acks=all, as the Python Kafka peer; the consumer is a group member reading from the earliest offset.
 */
public final class KafkaLoad {
    private final Map<String, String> args;
    private final int size;

    private KafkaLoad(Map<String, String> args) {
        this.args = args;
        this.size = intArg("size", 1024);
    }

    private int intArg(String k, int dflt) {
        return args.containsKey(k) ? Integer.parseInt(args.get(k)) : dflt;
    }

    private double dblArg(String k, double dflt) {
        return args.containsKey(k) ? Double.parseDouble(args.get(k)) : dflt;
    }

    private byte[] body(long id, double stamp) {
        byte[] head = (id + "|" + String.format("%.3f", stamp) + "|").getBytes(StandardCharsets.US_ASCII);
        byte[] b = new byte[Math.max(size, head.length)];
        Arrays.fill(b, (byte) 'x');
        System.arraycopy(head, 0, b, 0, head.length);
        return b;
    }

    private void run() throws Exception {
        String phase = args.getOrDefault("phase", "throughput");
        String topic = args.get("topic");
        int expected = phase.equals("paced")
            ? (int) Math.round(dblArg("rate", 1000) * dblArg("seconds", 5)) : intArg("n", 10000);
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        if (args.containsKey("linger_ms")) {
            pp.put(ProducerConfig.LINGER_MS_CONFIG, args.get("linger_ms"));
        }
        KafkaProducer<byte[], byte[]> producer =
            new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer());
        LoadGen.Recorder rec = new LoadGen.Recorder(expected);
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, "kafkaload_" + topic);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        KafkaConsumer<byte[], byte[]> consumer =
            new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        consumer.subscribe(List.of(topic));
        AtomicBoolean assigned = new AtomicBoolean();
        AtomicBoolean stop = new AtomicBoolean();
        Thread poller = new Thread(() -> {
            while (!stop.get()) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    rec.on(r.value(), LoadGen.nowMs());
                }
                if (!consumer.assignment().isEmpty()) {
                    assigned.set(true);
                }
            }
            consumer.close();
        }, "kafkaload-consumer");
        poller.start();
        long deadline = System.currentTimeMillis() + 60_000;
        while (!assigned.get()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the consumer was given no partition of " + topic + " in 60 s");
            }
            Thread.sleep(20);
        }
        producer.send(new ProducerRecord<>(topic, body(-1, LoadGen.nowMs()))).get();
        int warmup = intArg("warmup", 0);
        if (warmup > 0) {
            send(producer, topic, phase, warmup, -warmup - 1);
        }
        System.out.println("{\"event\":\"ready\"}");
        System.out.flush();
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII)).readLine();
        double t0 = LoadGen.nowMs();
        long[] sent = send(producer, topic, phase, expected, 0);
        double t1 = LoadGen.nowMs();
        System.out.println("{\"event\":\"sent\",\"count\":" + sent[0] + ",\"errors\":" + sent[1]
            + ",\"send_s\":" + (t1 - t0) / 1000 + ",\"t0_ms\":" + t0 + "}");
        System.out.flush();
        rec.all.await((long) (dblArg("wait_s", 60) * 1000), TimeUnit.MILLISECONDS);
        String got = rec.json();
        stop.set(true);
        poller.join(10_000);
        producer.close();
        System.out.println("{\"event\":\"done\",\"expected\":" + expected + "," + got + "}");
        System.out.flush();
    }

    /** The phase's sends, ids from {@code idBase}, each acknowledged (acks=all); [acknowledged, failed]. */
    private long[] send(KafkaProducer<byte[], byte[]> producer, String topic, String phase, int count, int idBase)
            throws Exception {
        int window = intArg("window", 256);
        Semaphore inFlight = new Semaphore(window);
        AtomicLong ok = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicReference<Exception> firstError = new AtomicReference<>();
        double rate = dblArg("rate", 1000);
        long start = System.nanoTime();
        for (int i = 0; i < count; i++) {
            if (phase.equals("paced")) {
                long d = start + (long) (i * 1e9 / rate) - System.nanoTime();
                if (d > 0) {
                    LockSupport.parkNanos(d);
                }
            }
            inFlight.acquire();
            producer.send(new ProducerRecord<>(topic, body(idBase + i, LoadGen.nowMs())), (md, e) -> {
                if (e == null) {
                    ok.incrementAndGet();
                } else {
                    failed.incrementAndGet();
                    firstError.compareAndSet(null, e);
                }
                inFlight.release();
            });
        }
        producer.flush();
        inFlight.acquire(window);
        if (firstError.get() != null) {
            System.err.println("first send error: " + firstError.get());
        }
        return new long[] {ok.get(), failed.get()};
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int eq = s.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("expected key=value, got " + s);
            }
            a.put(s.substring(0, eq), s.substring(eq + 1));
        }
        try {
            new KafkaLoad(a).run();
        } catch (Throwable e) {
            System.out.println("{\"event\":\"error\",\"error\":\"" + String.valueOf(e).replace("\\", "\\\\")
                .replace("\"", "'").replace("\n", " ") + "\"}");
            System.out.flush();
            System.exit(2);
        }
        System.exit(0);
    }
}
