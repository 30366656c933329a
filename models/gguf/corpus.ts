// A small, varied training corpus for the BPE merges: prose, dialogue, JSON-ish, code-ish text and
// digits. Written for this project; its only job is to give the tokenizer realistic merges.

export const BPE_CORPUS = String.raw`
The weather this morning was cold and clear, so we walked to the market before the crowds arrived.
Fresh bread, apples, cheese and a bag of coffee beans cost less than we expected. On the way home we
stopped at the library to return three books and borrow two new ones about gardening and history.

A good answer is short, correct and easy to read. When you are not sure about something, say so and
explain what you would need to know in order to be sure. If the question is ambiguous, ask a follow-up
question instead of guessing. Thank you for your patience; I will try to help as well as I can.

User: Can you tell me what time the store opens on Sunday?
Assistant: The store opens at 9:30 in the morning on Sunday and closes at 5:00 in the afternoon.
User: What about public holidays?
Assistant: On public holidays the store is closed, except for the first of May, when it opens at noon.

Here is a summary of the meeting. First, the team agreed that the new release should ship next week.
Second, the documentation needs another review, especially the section on installation and updates.
Third, everyone should write tests for the features they own. Finally, the next meeting is on Tuesday.

The quick brown fox jumps over the lazy dog. She sells sea shells by the sea shore. How much wood would
a woodchuck chuck if a woodchuck could chuck wood? Peter Piper picked a peck of pickled peppers.

Reasoning step by step: the train leaves at 14:05 and the trip takes 2 hours and 47 minutes, so it
arrives at 16:52. If it is delayed by 15 minutes, it arrives at 17:07. The ticket costs 23.50 euros,
and a return ticket costs 42.00 euros, which saves 5.00 euros compared with two single tickets.

Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 20 25 32 42 64 100 128 256 512 1000 1024 2048 4096
8192 16384 65536 3.14159 2.71828 1.41421 -7 +12 1e-6 0.001 99.9% 2024-05-17 12:34:56 555-0199

{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
{"name": "search", "arguments": {"query": "best pizza near me", "limit": 5}}
{"id": 42, "type": "function", "function": {"name": "lookup", "parameters": {"type": "object",
"properties": {"id": {"type": "string", "description": "The id of the item"}}, "required": ["id"]}}}
{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi, how can I help?"}
{"ok": true, "count": 3, "items": [1, 2, 3], "error": null, "next": false, "score": 0.75}

function add(a, b) {
  return a + b;
}

const result = items.filter((item) => item.active).map((item) => item.name);
for (let i = 0; i < result.length; i++) {
  console.log(i, result[i]);
}

def fibonacci(n):
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)

class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()

SELECT id, name, email FROM users WHERE created_at > '2024-01-01' ORDER BY name LIMIT 10;
if (x != null && y >= 0) { return x * y / 2; } else { throw new Error("invalid input"); }
export async function fetchJson(url: string): Promise<unknown> { const res = await fetch(url); return res.json(); }
git commit -m "Fix the parser" && git push origin main
curl -s http://localhost:8080/v1/chat/completions -H "Content-Type: application/json"

Dear customer, your order number 58213 has been shipped and should arrive within three to five
business days. You can track the package on our website. If you have any questions, please reply to
this email or call our support line between 8 am and 6 pm, Monday to Friday.

Once upon a time there was a small village at the edge of a large forest. The people of the village
were farmers, and every autumn they gathered to celebrate the harvest with music, food and stories.
One year a stranger arrived with a map of the forest, and the children followed him to find a hidden
lake. They returned at sunset, tired and happy, with pockets full of smooth stones and pine cones.

Questions and answers:
Q: What is the capital of France? A: Paris.
Q: How many days are in a week? A: Seven.
Q: What is 12 times 12? A: 144.
Q: Which planet is known as the red planet? A: Mars.
Q: Who wrote the play about a prince of Denmark? A: William Shakespeare.

Tips for writing clear code: use descriptive names, keep functions small, handle errors explicitly,
write tests, and remove code that is no longer used. Comments should explain why, not what.
It's important that you're careful; they've said we'll check what I'd done and what she'll do.

<think>
The user wants the weather. I should call the tool with the city name.
</think>

Temperature: 21 degrees. Humidity: 64%. Wind: 12 km/h from the north-west. Sunrise at 06:12.
Price list: apples $1.20/kg, pears $1.85/kg, milk $0.99, eggs (12) $3.49, bread $2.10.
Status codes: 200 OK, 201 Created, 204 No Content, 400 Bad Request, 404 Not Found, 500 Error.
`;
