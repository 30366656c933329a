// A Qwen3-style ChatML Jinja template (tokenizer.chat_template): system/user/assistant/tool roles,
// tools listed in the system turn inside <tools></tools>, assistant tool calls as <tool_call> JSON,
// tool results as <tool_response> blocks inside a user turn, <think> reasoning kept only after the
// last real user query, and `enable_thinking=false` prefilling an empty think block.

const TOOLS_PREAMBLE =
  "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n" +
  "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>";

const TOOLS_POSTAMBLE =
  "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments " +
  "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n" +
  '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call>';

export const QWEN3_CHAT_TEMPLATE = `
{%- set first_is_system = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
  {{- '<|im_start|>system\\n' -}}
  {%- if first_is_system -%}{{- messages[0].content + '\\n\\n' -}}{%- endif -%}
  {{- "${TOOLS_PREAMBLE}" -}}
  {%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}
  {{- "${TOOLS_POSTAMBLE}" + '<|im_end|>\\n' -}}
{%- elif first_is_system -%}
  {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' -}}
{%- endif -%}
{#- Reasoning is shown only for assistant turns after the last user message that is not a tool result. -#}
{%- set state = namespace(last_query = messages | length - 1, looking = true) -%}
{%- for m in messages | reverse -%}
  {%- set i = messages | length - 1 - loop.index0 -%}
  {%- if state.looking and m.role == 'user' and m.content is string
        and not (m.content.startswith('<tool_response>') and m.content.endswith('</tool_response>')) -%}
    {%- set state.last_query = i -%}
    {%- set state.looking = false -%}
  {%- endif -%}
{%- endfor -%}
{%- for m in messages -%}
  {%- set text = m.content if m.content is string else '' -%}
  {%- if m.role == 'user' or (m.role == 'system' and not loop.first) -%}
    {{- '<|im_start|>' + m.role + '\\n' + text + '<|im_end|>\\n' -}}
  {%- elif m.role == 'assistant' -%}
    {%- set thought = '' -%}
    {%- if m.reasoning_content is string -%}
      {%- set thought = m.reasoning_content -%}
    {%- elif '</think>' in text -%}
      {%- set thought = text.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') -%}
      {%- set text = text.split('</think>')[-1].lstrip('\\n') -%}
    {%- endif -%}
    {{- '<|im_start|>assistant\\n' -}}
    {%- if loop.index0 > state.last_query and (loop.last or thought) -%}
      {{- '<think>\\n' + thought.strip('\\n') + '\\n</think>\\n\\n' + text.lstrip('\\n') -}}
    {%- else -%}
      {{- text -}}
    {%- endif -%}
    {%- if m.tool_calls -%}
      {%- for call in m.tool_calls -%}
        {%- if not loop.first or text -%}{{- '\\n' -}}{%- endif -%}
        {%- set fn = call.function if call.function else call -%}
        {{- '<tool_call>\\n{"name": "' + fn.name + '", "arguments": ' -}}
        {%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
        {{- '}\\n</tool_call>' -}}
      {%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>\\n' -}}
  {%- elif m.role == 'tool' -%}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\\n<tool_response>\\n' + text + '\\n</tool_response>' -}}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\\n' -}}
  {%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}
{%- endif -%}
`.trim();
