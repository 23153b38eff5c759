package queuecore

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultWebhookTolerance is how far a delivery's webhook-timestamp may be from now (five minutes).
const DefaultWebhookTolerance = 5 * time.Minute

// ErrWebhookVerification is what VerifyWebhook's errors match with errors.Is: a delivery not signed by
// the secret, too old, or missing a header.
var ErrWebhookVerification = errors.New("queuecore: webhook verification failed")

// WebhookOptions tune VerifyWebhook. The zero value checks the timestamp with DefaultWebhookTolerance.
type WebhookOptions struct {
	Tolerance       time.Duration // 0: DefaultWebhookTolerance
	IgnoreTimestamp bool          // skip the time check (never the signature)
	Now             time.Time     // zero: time.Now()
}

func webhookKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, fmt.Errorf("%w: the secret is not a whsec_… signing secret", ErrWebhookVerification)
	}
	return key, nil
}

func webhookMAC(key []byte, id string, timestamp int64, payload []byte) string {
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, timestamp)
	mac.Write(payload)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// SignWebhook is the "v1,<base64>" Standard Webhooks signature of payload sent as id at timestamp, keyed
// by the secret (whsec_ and base64 of the key): what a push group's deliveries carry.
func SignWebhook(secret, id string, timestamp time.Time, payload []byte) (string, error) {
	key, err := webhookKey(secret)
	if err != nil {
		return "", err
	}
	return "v1," + webhookMAC(key, id, timestamp.Unix(), payload), nil
}

// VerifyWebhook checks a push group's delivery: the webhook-id, webhook-timestamp and webhook-signature
// headers against payload (the raw body) and one of secrets (several while switching to a rotated one).
// The signature header may hold several space-separated signatures (a rotation): one match is enough.
// Errors match ErrWebhookVerification.
//
//	body, _ := io.ReadAll(r.Body)
//	if err := queuecore.VerifyWebhook(body, r.Header, nil, secret); err != nil {
//		http.Error(w, "bad signature", http.StatusUnauthorized)
//		return
//	}
func VerifyWebhook(payload []byte, header http.Header, opts *WebhookOptions, secrets ...string) error {
	if opts == nil {
		opts = &WebhookOptions{}
	}
	fail := func(why string) error { return fmt.Errorf("%w: %s", ErrWebhookVerification, why) }
	id, stamp, signatures := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	for name, value := range map[string]string{"webhook-id": id, "webhook-timestamp": stamp, "webhook-signature": signatures} {
		if value == "" {
			return fail("missing the " + name + " header")
		}
	}
	timestamp, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return fail("webhook-timestamp is not a number of seconds")
	}
	if !opts.IgnoreTimestamp {
		tolerance, now := opts.Tolerance, opts.Now
		if tolerance == 0 {
			tolerance = DefaultWebhookTolerance
		}
		if now.IsZero() {
			now = time.Now()
		}
		at := time.Unix(timestamp, 0)
		if at.Before(now.Add(-tolerance)) {
			return fail("the delivery is too old (webhook-timestamp)")
		}
		if at.After(now.Add(tolerance)) {
			return fail("the delivery is dated in the future (webhook-timestamp)")
		}
	}
	if len(secrets) == 0 {
		return fail("no secret given")
	}
	var expected [][]byte
	for _, secret := range secrets {
		key, err := webhookKey(secret)
		if err != nil {
			return err
		}
		expected = append(expected, []byte(webhookMAC(key, id, timestamp, payload)))
	}
	for _, entry := range strings.Split(signatures, " ") {
		version, value, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		for _, want := range expected {
			if hmac.Equal([]byte(value), want) {
				return nil
			}
		}
	}
	return fail("no signature matches the secret")
}

// DecodeWebhook verifies a delivery (VerifyWebhook) and decodes its JSON body into v.
func DecodeWebhook(payload []byte, header http.Header, v any, opts *WebhookOptions, secrets ...string) error {
	if err := VerifyWebhook(payload, header, opts, secrets...); err != nil {
		return err
	}
	return json.NewDecoder(bytes.NewReader(payload)).Decode(v)
}
