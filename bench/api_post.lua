-- wrk: POST a new recipient (the API's create) with the token from the environment.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local token = os.getenv("BENCH_TOKEN")
if token then wrk.headers["Authorization"] = "Token " .. token end
wrk.body = '{"first_name":"Ada","last_name":"Lovelace","date_of_birth":"1990-12-10","timezone":"Europe/London"}'
