-- wrk: POST a webhook-sized JSON body with a per-request idempotency key.
wrk.method = "POST"
wrk.body = '{"message":"Hey, Ada Lovelace it\'s your birthday","event_id":"5f0c1c3e-2b7e-4a55-9c39-1f3e0b6c9a11","event_type":"BIRTHDAY","user_id":"8d1e5a0c-61f1-4c1b-a7a4-2f0c3b9d7e22","occurrence_date":"2026-11-22","target_timestamp_utc":"2026-11-22T09:00:00+00:00"}'
wrk.headers["Content-Type"] = "application/json"
counter = 0
request = function()
  counter = counter + 1
  wrk.headers["X-Idempotency-Key"] = "wrk-" .. counter
  return wrk.format(nil, nil, nil, wrk.body)
end
