// The official Go client (github.com/apache/rocketmq-client-go/v2) as a user writes it, driven by
// tests/reference/test_go_client.py: a producer's sync sends, then a push consumer receiving them.
// Usage: goclient NAMESRV TOPIC GROUP COUNT. Prints one JSON object a line: "sent", "received", then "done".
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

var out sync.Mutex

func emit(v map[string]any) {
	b, _ := json.Marshal(v)
	out.Lock()
	defer out.Unlock()
	fmt.Println(string(b))
}

func fail(what string, err error) {
	emit(map[string]any{"event": "error", "what": what, "error": err.Error()})
	os.Exit(1)
}

func main() {
	rlog.SetLogLevel("error")
	namesrv, topic, group := os.Args[1], os.Args[2], os.Args[3]
	count, err := strconv.Atoi(os.Args[4])
	if err != nil {
		fail("count", err)
	}
	p, err := rocketmq.NewProducer(producer.WithNameServer([]string{namesrv}), producer.WithGroupName(group+"_p"),
		producer.WithRetry(2))
	if err != nil {
		fail("producer", err)
	}
	if err := p.Start(); err != nil {
		fail("producer start", err)
	}
	for i := 0; i < count; i++ {
		m := primitive.NewMessage(topic, []byte(fmt.Sprintf("go %d", i)))
		m.WithTag("TagG")
		m.WithKeys([]string{fmt.Sprintf("gk%d", i)})
		m.WithProperty("origin", "go")
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			fail("send", err)
		}
		emit(map[string]any{"event": "sent", "status": int(r.Status), "id": r.MsgID, "offsetId": r.OffsetMsgID,
			"queue": r.MessageQueue.QueueId, "body": fmt.Sprintf("go %d", i)})
	}
	_ = p.Shutdown()

	got := make(chan struct{}, count)
	seen := sync.Map{}
	c, err := rocketmq.NewPushConsumer(consumer.WithNameServer([]string{namesrv}), consumer.WithGroupName(group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		fail("consumer", err)
	}
	sel := consumer.MessageSelector{Type: consumer.TAG, Expression: "TagG"}
	err = c.Subscribe(topic, sel, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			if _, dup := seen.LoadOrStore(m.MsgId, true); dup {
				continue
			}
			emit(map[string]any{"event": "received", "id": m.MsgId, "topic": m.Topic, "tag": m.GetTags(),
				"keys": m.GetKeys(), "origin": m.GetProperty("origin"), "body": string(m.Body),
				"queue": m.Queue.QueueId, "queueOffset": m.QueueOffset, "reconsumeTimes": m.ReconsumeTimes,
				"storeHostSet": m.StoreHost != "", "bornHostSet": m.BornHost != ""})
			got <- struct{}{}
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		fail("subscribe", err)
	}
	if err := c.Start(); err != nil {
		fail("consumer start", err)
	}
	deadline := time.After(60 * time.Second)
	for n := 0; n < count; n++ {
		select {
		case <-got:
		case <-deadline:
			n = count
		}
	}
	_ = c.Shutdown()
	emit(map[string]any{"event": "done"})
}
