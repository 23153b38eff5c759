package queuecore_test

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

// The Standard Webhooks spec's test vectors (standard-webhooks/standard-webhooks, the same secret, id,
// payload and expected signature in every library).
const (
	vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorBogus  = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
)

var vectorPayload = []byte(`{"test": 2432232314}`)

func signedHeader(t *testing.T, at time.Time, secret string) http.Header {
	t.Helper()
	sig, err := queuecore.SignWebhook(secret, vectorID, at, vectorPayload)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", vectorID)
	h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("webhook-signature", sig)
	return h
}

func TestSignWebhookSpecVector(t *testing.T) {
	for _, secret := range []string{vectorSecret, strings.TrimPrefix(vectorSecret, "whsec_")} {
		got, err := queuecore.SignWebhook(secret, vectorID, time.Unix(1614265330, 0), vectorPayload)
		if err != nil || got != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
			t.Fatalf("SignWebhook(%q) = %q, %v", secret, got, err)
		}
	}
}

func TestVerifyWebhook(t *testing.T) {
	now := time.Now()
	rotated := "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"
	cases := []struct {
		name    string
		at      time.Time
		modify  func(h http.Header)
		opts    *queuecore.WebhookOptions
		secrets []string
		ok      bool
	}{
		{name: "valid signature is valid", at: now, ok: true},
		{name: "missing id", at: now, modify: func(h http.Header) { h.Del("webhook-id") }},
		{name: "missing timestamp", at: now, modify: func(h http.Header) { h.Del("webhook-timestamp") }},
		{name: "missing signature", at: now, modify: func(h http.Header) { h.Del("webhook-signature") }},
		{name: "invalid signature", at: now, modify: func(h http.Header) { h.Set("webhook-signature", vectorBogus) }},
		{name: "old timestamp fails", at: now.Add(-queuecore.DefaultWebhookTolerance - time.Second)},
		{name: "new timestamp fails", at: now.Add(queuecore.DefaultWebhookTolerance + time.Second)},
		{name: "valid multi sig is valid", at: now, ok: true, modify: func(h http.Header) {
			h.Set("webhook-signature", strings.Join([]string{vectorBogus, "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", h.Get("webhook-signature"), vectorBogus}, " "))
		}},
		{name: "old timestamp passes when ignoring it", at: now.Add(-time.Hour), opts: &queuecore.WebhookOptions{IgnoreTimestamp: true}, ok: true},
		{name: "a moved timestamp fails even when ignoring it", at: now, opts: &queuecore.WebhookOptions{IgnoreTimestamp: true},
			modify: func(h http.Header) { h.Set("webhook-timestamp", "946684800") }},
		{name: "a rotation verifies with either secret", at: now, secrets: []string{rotated, vectorSecret}, ok: true},
		{name: "another secret fails", at: now, secrets: []string{rotated}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := signedHeader(t, tc.at, vectorSecret)
			if tc.modify != nil {
				tc.modify(h)
			}
			secrets := tc.secrets
			if secrets == nil {
				secrets = []string{vectorSecret}
			}
			err := queuecore.VerifyWebhook(vectorPayload, h, tc.opts, secrets...)
			if tc.ok && err != nil {
				t.Fatalf("failed: %v", err)
			}
			if !tc.ok && !errors.Is(err, queuecore.ErrWebhookVerification) {
				t.Fatalf("want ErrWebhookVerification, got %v", err)
			}
		})
	}
}

func TestDecodeWebhook(t *testing.T) {
	var body struct {
		Test int64 `json:"test"`
	}
	if err := queuecore.DecodeWebhook(vectorPayload, signedHeader(t, time.Now(), vectorSecret), &body, nil, vectorSecret); err != nil || body.Test != 2432232314 {
		t.Fatalf("DecodeWebhook: %v %+v", err, body)
	}
	if err := queuecore.DecodeWebhook([]byte(`{"test": 1}`), signedHeader(t, time.Now(), vectorSecret), &body, nil, vectorSecret); !errors.Is(err, queuecore.ErrWebhookVerification) {
		t.Fatalf("a changed body: %v", err)
	}
}

func ExampleVerifyWebhook() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	payload := []byte(`{"test": 2432232314}`)
	sig, _ := queuecore.SignWebhook(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), payload)
	header := http.Header{}
	header.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	header.Set("webhook-timestamp", "1614265330")
	header.Set("webhook-signature", sig)
	err := queuecore.VerifyWebhook(payload, header, &queuecore.WebhookOptions{IgnoreTimestamp: true}, secret)
	fmt.Println(err == nil)
	// Output: true
}
